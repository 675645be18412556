"""Tabular tasks (binary, multiclass, regression, count) read from registry packages' real data (R packages through gen_common.r_dataset, statsmodels, scikit-learn).

Each task: @task(id, title=..., modality=..., task_type=..., metric=...,
direction=..., pred_columns=[...], split=..., about="what the agent reads")
on a function returning write_split(...) or series_split(...) frames (see
generate.py's tasks for the conventions).
"""
from gen_common import encode_pixels, r_dataset, series_split, split_idx, task, write_split  # noqa: F401
