"""The AlpacaEval judgments bundled in examples/data as a model x item loss table with item
embeddings: the fixture of the Cer-Eval, FT-Eval and ranking tests and benchmarks (test-only:
a job reads the same files through ``data:``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from certsel.workers.replay import DATA_DIR, _column, _numeric, _read_embeddings
from certsel.workers.tables import id_column, match_items, read_table

ALPACAEVAL_PREFERENCES = DATA_DIR / "alpacaeval_preferences.parquet"
ALPACAEVAL_EMBEDDINGS = DATA_DIR / "alpacaeval_embeddings.parquet"


@dataclass(frozen=True)
class PreferenceTable:
    """Per-item losses of several models on one item set, with item embeddings.

    ``losses`` is (models, items) in [0, 1]; ``features`` (items, d); ``subsets`` the item's
    sub-source (a natural fixed partition).
    """

    models: list
    items: np.ndarray
    losses: np.ndarray
    features: np.ndarray
    subsets: np.ndarray


def load_preference_table(preferences=ALPACAEVAL_PREFERENCES, embeddings=ALPACAEVAL_EMBEDDINGS) -> PreferenceTable:
    """Load an AlpacaEval-style table (model, item, loss) and its embeddings (item, e0..e{d-1}).

    Every model must have exactly one loss in [0, 1] for every embedded item.
    """
    prefs = read_table(preferences, "preference table")
    model = _column(prefs, "model", preferences).astype(str)
    item = id_column(_column(prefs, "item", preferences), "item", preferences)
    loss = _numeric(_column(prefs, "loss", preferences), "loss", preferences)
    if loss.min() < 0 or loss.max() > 1:
        raise ValueError(f"{preferences}: column 'loss' has values outside [0, 1]")
    items, feats, subsets = _read_embeddings(embeddings)
    models = sorted(set(model.tolist()))
    losses = np.full((len(models), items.size), np.nan)
    mi = np.searchsorted(models, model)
    ii = match_items(items, item)
    if np.any(ii < 0):
        raise ValueError(f"{preferences}: items without an embedding in {embeddings}")
    if np.unique(mi * items.size + ii).size != mi.size:
        raise ValueError(f"{preferences}: duplicated (model, item) pairs")
    losses[mi, ii] = loss
    if np.isnan(losses).any():
        raise ValueError(f"{preferences}: {int(np.isnan(losses).sum())} missing (model, item) pairs")
    return PreferenceTable(models, items, losses, feats, subsets)


