"""Datasets: registry, download, readers, preprocessing, splitting, batching and synthetic data."""
from .batching import Batch, TrainingWindows, iterate_batches, iterate_cloze_batches, iterate_prefix_batches, left_pad, PrefixSamples
from .dataset import DatasetStats, SequenceDataset
from .loading import dataset_status, file_statistics, format_dataset_table, load_dataset, load_or_synthetic
from .registry import DATASETS, dataset_names, get_spec
from .split import LeaveOneOutSplit, leave_one_out
from .synthetic import make_synthetic

__all__ = ["Batch", "TrainingWindows", "iterate_batches", "iterate_cloze_batches", "iterate_prefix_batches", "PrefixSamples", "left_pad", "DatasetStats", "SequenceDataset",
           "dataset_status", "file_statistics", "format_dataset_table", "load_dataset", "load_or_synthetic", "DATASETS",
           "dataset_names", "get_spec", "LeaveOneOutSplit", "leave_one_out", "make_synthetic"]
