// Typesets TeX with MathJax 3 (the engine JupyterLab renders notebook math with) and reports each formula
// it cannot typeset. Input on stdin: JSON [{"where": ..., "tex": ..., "display": bool}]. Output on stdout:
// JSON [{"where", "tex", "error"}], the failures only. Run by tests/test_notebook_text.py, which finds the npm
// package mathjax-full (3.2.x) and puts its node_modules folder on NODE_PATH.
const {mathjax} = require('mathjax-full/js/mathjax.js');
const {TeX} = require('mathjax-full/js/input/tex.js');
const {liteAdaptor} = require('mathjax-full/js/adaptors/liteAdaptor.js');
const {RegisterHTMLHandler} = require('mathjax-full/js/handlers/html.js');
const {SerializedMmlVisitor} = require('mathjax-full/js/core/MmlTree/SerializedMmlVisitor.js');
const {AllPackages} = require('mathjax-full/js/input/tex/AllPackages.js');
const {STATE} = require('mathjax-full/js/core/MathItem.js');

RegisterHTMLHandler(liteAdaptor());
// JupyterLab loads these TeX packages, and 'require', which loads more of them in a browser: every package it
// could load is here already, so a \require{...} in a notebook would be reported (the course has none).
// 'noerrors' and 'noundefined' would turn an error into red text in the page instead of an exception, so they
// are left out here, where an error must be reported, and so is 'bussproofs' (proof trees), which needs an
// output jax that measures boxes.
const packages = AllPackages.filter(name => !['noerrors', 'noundefined', 'bussproofs'].includes(name));
const document = mathjax.document('', {InputJax: new TeX({packages, formatError: (jax, err) => { throw err; }})});
const visitor = new SerializedMmlVisitor();

let input = '';
process.stdin.on('data', chunk => input += chunk);
process.stdin.on('end', () => {
  const failures = [];
  for (const item of JSON.parse(input)) {
    try {
      const mml = visitor.visitTree(document.convert(item.tex, {display: item.display, end: STATE.CONVERT}));
      if (mml.includes('<merror')) failures.push({where: item.where, tex: item.tex, error: 'typeset as an error'});
    } catch (err) {
      failures.push({where: item.where, tex: item.tex, error: String(err.message || err)});
    }
  }
  process.stdout.write(JSON.stringify(failures));
});
