"""The exercise-check framework (tutorial_lib.course.checks) and the checks of notebook 00."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tutorial_lib.course.checks import (
    Case,
    CheckFailed,
    ExerciseNotDone,
    check_function,
    expect,
    explain_difference,
    passes,
    short_repr,
)
from tutorial_lib.course.checks import ch00


# ----------------------------------------------------------------------------- explain_difference
@pytest.mark.parametrize("value", [
    np.arange(6).reshape(2, 3), torch.arange(6).reshape(2, 3), [[0, 1, 2], [3, 4, 5]],
])
def test_equal_values_of_any_array_type(value):
    assert explain_difference(value, np.arange(6).reshape(2, 3)) is None


def test_float_tolerance():
    e = np.linspace(0, 1, 5)
    assert explain_difference(e + 1e-7, e) is None
    msg = explain_difference(e + 1e-2, e)
    assert "values differ at 5 of 5" in msg and "largest absolute difference 0.01" in msg


def test_shape_mismatch_and_layout_hints():
    e = np.zeros((2, 3, 4))
    assert "expected (2, 3, 4), yours is (2, 4, 3)" in explain_difference(np.zeros((2, 4, 3)), e)
    assert "transpose" in explain_difference(np.zeros((2, 4, 3)), e)
    assert "reshape" in explain_difference(np.zeros((6, 4)), e)
    assert "batch dimension is missing" in explain_difference(np.zeros((3, 4)), e)
    assert "extra leading dimension" in explain_difference(np.zeros((1, 2, 3, 4)), e)
    assert "keepdim" in explain_difference(np.zeros((2, 3)), np.zeros((2, 3, 1)))


def test_values_differ_names_the_first_index():
    e = np.array([[1, 2, 3], [4, 5, 6]])
    a = e.copy()
    a[1, 2] = 9
    msg = explain_difference(a, e, "x")
    assert "x: values differ at 1 of 6 positions; first at index (1, 2): yours 9, expected 6" in msg
    assert "yours:" in msg and "expected:" in msg  # small arrays are shown in full


def test_scalars():
    assert explain_difference(3, 3) is None
    assert explain_difference(torch.tensor(0.5), 0.5) is None
    assert explain_difference(2.0, 3.0, "loss") == "loss: yours is 2, expected 3"


def test_dtype_kind_mismatch():
    msg = explain_difference(np.array([1.0, 2.0]), np.array([1, 2]))
    assert "expected integers" in msg and "floats" in msg
    assert explain_difference(np.array([1, 2], dtype=np.int32), np.array([1, 2])) is None
    assert "booleans" in explain_difference(np.array([1, 0]), np.array([True, False]))


def test_nan_is_reported():
    msg = explain_difference(np.array([0.5, np.nan]), np.array([0.5, 0.5]))
    assert "NaN at 1 position(s), first at index 1" in msg


def test_masking_hints():
    e = np.array([[0.0, -np.inf], [0.3, 0.1]])
    a = np.array([[0.0, 0.7], [0.3, 0.1]])
    assert "masking looks wrong" in explain_difference(a, e)
    assert "-inf" in explain_difference(a, e)
    weights_e = np.array([[1.0, 0.0], [0.4, 0.6]])
    weights_a = np.array([[0.5, 0.5], [0.4, 0.6]])
    # position (0, 0) differs too, so this is not purely a masking error
    assert "masking" not in explain_difference(weights_a, weights_e)
    assert "masked in the reference" in explain_difference(np.array([[1.0, 0.2], [0.4, 0.6]]), weights_e)
    assert "inverted" in explain_difference(np.array([[1.0, 0.0], [0.0, 0.6]]), weights_e)
    # zeros in a vector are values (e.g. NDCG outside the top K), not a mask; booleans are not -inf/0 masks
    assert "masking" not in explain_difference(np.array([0.3, 0.5]), np.array([0.0, 0.5]))
    assert "masking" in explain_difference(np.array([0.3, 0.5]), np.array([-np.inf, 0.5]))
    assert "masking" not in explain_difference(np.ones((2, 2), bool), np.eye(2, dtype=bool))


def test_an_all_zero_result_is_called_that_not_an_inverted_mask():
    e = np.tril(np.full((3, 3), 0.5))
    msg = explain_difference(np.zeros((3, 3)), e)
    assert "every value of yours is 0" in msg and "inverted" not in msg
    partly = e.copy()
    partly[2] = 0.0                      # one row hidden: still the masking guess, not "every value is 0"
    msg = explain_difference(partly, e)
    assert "masking looks wrong" in msg and "every value" not in msg


def test_structured_outputs():
    e = (np.zeros(2), np.ones(2))
    assert explain_difference((np.zeros(2), np.ones(2)), e) is None
    assert "expected a tuple of 2 values, got ndarray" in explain_difference(np.zeros(2), e)
    assert "expected 2 values, got 3" in explain_difference((1, 2, 3), e)
    assert "output[1]" in explain_difference((np.zeros(2), np.zeros(2)), e)
    assert "did you forget the `return`" in explain_difference(None, e)
    assert "keys differ" in explain_difference({"a": 1}, {"b": 1})
    assert "['a']" in explain_difference({"a": 1}, {"a": 2})


def test_short_repr():
    assert short_repr(np.array([3, 7, 2])) == "[3, 7, 2]"
    assert short_repr(torch.zeros(2, 5, 8)) == "<tensor of shape (2, 5, 8), float32>"
    assert short_repr([1, 2]) == "[1, 2]"


# ----------------------------------------------------------------------------- check_function
def ref_cumsum(x):
    return np.cumsum(np.asarray(x))


CASES = [Case(([1, 2, 3],), label="three numbers"), Case((np.arange(5),), label="a range")]


def test_success_prints_one_line(capsys):
    assert check_function(lambda x: np.cumsum(x), ref_cumsum, CASES, name="cumsum", library="np.cumsum") == 2
    out = capsys.readouterr().out
    assert out == "✅ `cumsum` matches the library's version (np.cumsum) on 2 test cases.\n"


def test_an_answer_that_calls_the_library_function_is_noticed(capsys):
    check_function(lambda x: np.cumsum(x), ref_cumsum, CASES, name="cumsum", library="numpy.cumsum")
    assert "ℹ `cumsum` calls the library's numpy.cumsum itself" in capsys.readouterr().out

    def by_hand(x):
        total, out = 0, []
        for v in x:
            total += v
            out.append(total)
        return np.array(out)

    check_function(by_hand, ref_cumsum, CASES, name="cumsum", library="numpy.cumsum")
    assert "calls the library's" not in capsys.readouterr().out


def test_library_objects_resolves_dotted_paths_only():
    from tutorial_lib.course.checks.base import library_objects
    from tutorial_lib.data import TrainingWindows, iterate_batches
    from tutorial_lib.evaluation import ndcg_at_k

    assert library_objects("tutorial_lib.evaluation.ndcg_at_k") == (ndcg_at_k,)
    assert library_objects("numpy.cumsum") == (np.cumsum,)
    assert library_objects("tutorial_lib.data.TrainingWindows + iterate_batches") == (TrainingWindows, iterate_batches)
    assert library_objects("tutorial_lib.attention.local.LocalAttention (encoder='conv')") == ()
    assert library_objects("tutorial_lib.evaluation.no_such_function") == ()
    assert library_objects(None) == ()


def test_ch00_notices_an_answer_built_on_the_library(capsys):
    from tutorial_lib.data import TrainingWindows, iterate_batches

    def make_window(history, max_len):
        windows = TrainingWindows.from_train([np.asarray(history, dtype=np.int64)], max_len)
        batch = next(iterate_batches(windows, batch_size=1, generator=torch.Generator().manual_seed(0),
                                     bucketing=False))
        return batch.inputs[0].numpy(), batch.targets[0].numpy()

    ch00.check_make_window(make_window)
    assert "calls the library's tutorial_lib.data.TrainingWindows + iterate_batches itself" in capsys.readouterr().out


def test_stub_raises_exercise_not_done_which_is_a_not_implemented_error():
    def cumsum(x):
        # YOUR CODE HERE
        raise NotImplementedError()

    with pytest.raises(NotImplementedError) as info:
        check_function(cumsum, ref_cumsum, CASES, library="np.cumsum")
    assert isinstance(info.value, ExerciseNotDone)
    msg = str(info.value)
    assert "exercise not done yet" in msg and "continues with the library's version (np.cumsum)" in msg
    assert "`cumsum`" in msg


def test_a_dtype_error_of_the_learners_code_is_a_failure_not_an_exercise_left_undone():
    # torch raises NotImplementedError for an operation a dtype lacks; that is a mistake to explain, not the stub
    def cumsum(x):
        return torch.as_tensor(x).float() & torch.ones(len(x), dtype=torch.bool)

    with pytest.raises(CheckFailed, match=r"(?s)raised NotImplementedError: .*check the dtypes"):
        check_function(cumsum, ref_cumsum, CASES, library="np.cumsum")


def test_a_stub_without_source_is_still_recognised():
    # code run by exec() has no source line to read: the stub's empty message decides
    namespace: dict = {}
    exec(compile("def cumsum(x):\n    raise NotImplementedError()\n", "<no source>", "exec"), namespace)
    with pytest.raises(ExerciseNotDone):
        check_function(namespace["cumsum"], ref_cumsum, CASES)
    exec(compile("def cumsum(x):\n    raise NotImplementedError('not for Float')\n", "<no source>", "exec"),
         namespace)
    with pytest.raises(CheckFailed, match="not for Float"):
        check_function(namespace["cumsum"], ref_cumsum, CASES)


def test_wrong_result_raises_an_assertion_error_that_explains():
    def cumsum(x):
        return np.asarray(x) * 1

    with pytest.raises(AssertionError) as info:
        check_function(cumsum, ref_cumsum, CASES, hint="add the previous total",
                       diagnose=lambda case, yours, exp: "you returned the input unchanged")
    msg = str(info.value)
    assert isinstance(info.value, CheckFailed)
    assert "cumsum([1, 2, 3]) (three numbers)" in msg
    assert "first at index 1: yours 2, expected 3" in msg
    assert "Hint: you returned the input unchanged" in msg and "Reminder: add the previous total" in msg


def test_exception_in_learner_code_is_explained_and_chained():
    def cumsum(x):
        return x[10]

    with pytest.raises(CheckFailed, match="raised IndexError") as info:
        check_function(cumsum, ref_cumsum, CASES)
    assert isinstance(info.value.__cause__, IndexError)


def test_in_place_modification_is_caught():
    def cumsum(x):
        x = torch.as_tensor(x) if isinstance(x, torch.Tensor) else x
        np.cumsum(x, out=x)
        return x

    with pytest.raises(CheckFailed, match="modified its argument 1 in place"):
        check_function(cumsum, ref_cumsum, [Case((np.arange(4),))])


def test_in_place_change_of_a_list_is_caught_and_nan_is_not_a_change():
    def cumsum(x):
        x[:] = [v for v in x if v == v]          # drops the NaNs from the caller's list
        return np.cumsum(x)

    with pytest.raises(CheckFailed, match="modified its argument 1 in place"):
        check_function(cumsum, ref_cumsum, [Case(([1.0, float("nan"), 2.0],))])
    check_function(lambda x: np.cumsum(x), ref_cumsum, [Case(([1.0, float("nan"), 2.0],))], quiet=True)


def test_output_names_and_non_callable():
    def pair(x):
        return np.asarray(x), np.asarray(x)

    with pytest.raises(CheckFailed, match="`second`: values differ"):
        check_function(pair, lambda x: (np.asarray(x), np.asarray(x) + 1), CASES, output_names=("first", "second"))
    with pytest.raises(CheckFailed, match="expected a function"):
        check_function(3, ref_cumsum, CASES)


def test_expect():
    expect(True, "fine")
    with pytest.raises(CheckFailed, match="not causal"):
        expect(False, "not causal")


# ----------------------------------------------------------------------------- notebook 00
def solution_make_window(history, max_len):
    history = np.asarray(history, dtype=np.int64)
    seen, following = history[:-1][-max_len:], history[1:][-max_len:]
    inputs, targets = np.zeros(max_len, dtype=np.int64), np.zeros(max_len, dtype=np.int64)
    inputs[max_len - len(seen):] = seen
    targets[max_len - len(following):] = following
    return inputs, targets


def test_library_window_semantics():
    inputs, targets = ch00.library_window([5, 2, 9], max_len=5)
    assert inputs.tolist() == [0, 0, 0, 5, 2] and targets.tolist() == [0, 0, 0, 2, 9]
    inputs, targets = ch00.library_window([4, 8, 15, 16, 23, 42], max_len=3)
    assert inputs.tolist() == [15, 16, 23] and targets.tolist() == [16, 23, 42]


def test_ch00_accepts_the_solution_lists_and_tensors(capsys):
    ch00.check_make_window(solution_make_window)
    ch00.check_make_window(lambda h, max_len: tuple(torch.as_tensor(v) for v in solution_make_window(h, max_len)))
    ch00.check_make_window(lambda h, max_len: [v.tolist() for v in solution_make_window(h, max_len)])
    assert capsys.readouterr().out.count("✅") == 3


def test_ch00_stub(capsys):
    def make_window(history, max_len):
        raise NotImplementedError()

    ch00.check_make_window(make_window)  # prints instead of raising: Run All goes on
    assert "TrainingWindows" in capsys.readouterr().out
    with pytest.raises(ExerciseNotDone, match="TrainingWindows"):
        ch00.check_make_window.__wrapped__(make_window)


def right_padded(history, max_len):
    h = np.asarray(history)
    seen, following = h[:-1][-max_len:], h[1:][-max_len:]
    inputs, targets = np.zeros(max_len, dtype=np.int64), np.zeros(max_len, dtype=np.int64)
    inputs[:len(seen)], targets[:len(following)] = seen, following
    return inputs, targets


def oldest_items(history, max_len):
    h = np.asarray(history)
    return solution_make_window(h[: max_len + 1], max_len)


@pytest.mark.parametrize("wrong, hint", [
    (right_padded, "you padded on the right"),
    (oldest_items, "most RECENT"),
    (lambda h, max_len: solution_make_window(h, max_len)[::-1], "swapped"),
    (lambda h, max_len: (solution_make_window(h, max_len)[0],) * 2, "shifted by one step"),
    (lambda h, max_len: solution_make_window(h, max_len)[0], "return a pair"),
    (lambda h, max_len: tuple(v[1:] for v in solution_make_window(h, max_len)), "exactly max_len"),
])
def test_ch00_typical_mistakes_get_a_specific_hint(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        ch00.check_make_window(wrong)


def test_ipython_shows_a_check_s_message_and_only_the_learner_s_frames():
    def cumsum(x):
        return x[10]

    with pytest.raises(CheckFailed) as info:
        check_function(cumsum, ref_cumsum, CASES)
    shown = "\n".join(info.value._render_traceback_())
    assert "in cumsum" in shown and "return x[10]" in shown and "IndexError" in shown
    assert "checks/base.py" not in shown and shown.splitlines()[-3].startswith("CheckFailed: `cumsum` raised")

    def stub(x):
        raise NotImplementedError()

    with pytest.raises(ExerciseNotDone) as info:
        check_function(stub, ref_cumsum, CASES)
    assert info.value._render_traceback_() == [f"ExerciseNotDone: {info.value}"]


def test_make_window_with_the_right_values_as_floats_is_told_about_the_type_only():
    def as_floats(history, max_len):
        h = np.asarray(history)
        x, y = np.zeros(max_len), np.zeros(max_len)
        x[max_len - len(h[:-1][-max_len:]):], y[max_len - len(h[1:][-max_len:]):] = h[:-1][-max_len:], h[1:][-max_len:]
        return x, y

    with pytest.raises(CheckFailed) as info:
        ch00.check_make_window(as_floats)
    assert "expected integers" in str(info.value) and "FOLLOWS" not in str(info.value)


def test_a_stub_called_from_the_learner_s_function_is_named():
    def causal_mask(x):
        raise NotImplementedError()

    def cumsum(x):
        return causal_mask(x)

    with pytest.raises(ExerciseNotDone, match="`cumsum` calls `causal_mask`, which still raises"):
        check_function(cumsum, ref_cumsum, CASES)


def test_a_missing_dimension_is_located():
    msg = explain_difference(np.zeros((3, 5, 5)), np.zeros((3, 2, 5, 5)))
    assert "dimension 1 of the expected shape is missing?" in msg
    assert "dimension 0 or 1" in explain_difference(np.zeros((2, 5, 5)), np.zeros((2, 2, 5, 5)))


def test_passes_runs_a_check_quietly_and_says_whether_it_passed(capsys):
    def stub(history, max_len):
        raise NotImplementedError()

    assert passes(ch00.check_make_window, solution_make_window)
    assert not passes(ch00.check_make_window, stub)
    assert not passes(ch00.check_make_window, right_padded)
    assert capsys.readouterr().out == ""


def test_cutting_the_history_before_the_shift_gets_its_hint():
    """A learner's off-by-one in notebook 00: the last max_len items give only max_len - 1 pairs."""
    def cut_first(history, max_len):
        h = np.asarray(history, dtype=np.int64)[-max_len:]
        inputs, targets = np.zeros(max_len, np.int64), np.zeros(max_len, np.int64)
        inputs[max_len - len(h) + 1:], targets[max_len - len(h) + 1:] = h[:-1], h[1:]
        return inputs, targets

    with pytest.raises(CheckFailed, match="before shifting, which loses the oldest pair"):
        ch00.check_make_window(cut_first)
