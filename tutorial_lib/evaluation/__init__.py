"""Full-ranking and sampled evaluation (HR, NDCG, MRR @K), batched and exact."""
from .evaluator import Evaluator, sample_negatives
from .metrics import DEFAULT_KS, metrics_from_ranks, ndcg_at_k, rank_of_target
from .protocol import PROTOCOLS, EvalProtocol

__all__ = ["Evaluator", "EvalProtocol", "PROTOCOLS", "DEFAULT_KS", "metrics_from_ranks", "ndcg_at_k",
           "rank_of_target", "sample_negatives"]
