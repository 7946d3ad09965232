"""Choosing the features and C: greedy feature selection and cross-validation.

Judged on validation or, below `CV_MAX_VALIDATION` rows, by `cross_validate` over both.
"""

import numpy as np
from absl import logging
from scipy import sparse
from sklearn.model_selection import StratifiedKFold

from tf_mlstm.config.choices import CV_FOLDS
from tf_mlstm.transfer import features as features_lib
from tf_mlstm.transfer import labeled
from tf_mlstm.transfer.probe import fit as fit_lib

CV_MAX_VALIDATION = 2000
"""A validation split of this many rows or more chooses alone; a smaller one is
too noisy a judge (a standard error of a point or more on accuracy), so the
choice is made by `CV_FOLDS`-fold cross-validation over train and validation
together (`cross_validate`)."""


def cross_validation_folds(labels, folds=CV_FOLDS, seed=0) -> list[tuple] | None:
    """Stratified folds over rows whose every fit part has every class (or label value).

    Args:
      labels: [N] classes or [N, L] 0/1 labels.
      folds: how many folds wanted; fewer when the rarest stratum is smaller.
      seed: the shuffle seed.

    Returns:
      (fit rows, held-out rows) sorted index arrays per fold; None when no two folds work.
    """
    labels = np.asarray(labels)
    ids = labeled.strata(labels)
    if labels.ndim == 2:
        ids = _pool_rare(ids, folds)
    counts = np.bincount(ids - ids.min())
    folds = min(folds, int(counts[counts > 0].min()))
    if folds < 2:
        return None
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    pairs = [(np.sort(a), np.sort(b)) for a, b in splitter.split(np.zeros(len(ids)), ids)]
    for fit_rows, _ in pairs:
        kept = labels[fit_rows]
        if labels.ndim == 2:
            if any(len(np.unique(column)) < 2 for column in kept.T):
                return None
        elif len(np.unique(kept)) < len(np.unique(labels)):
            return None
    return pairs


def _pool_rare(ids, folds):
    """Stratum ids with the strata of fewer than `folds` rows pooled into one."""
    _, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
    rare = counts[inverse] < folds
    if not rare.any():
        return ids
    pooled = ids.min() - 1
    if rare.sum() < folds:  # too few even together: join the largest stratum
        pooled = ids[np.argmax(counts[inverse])]
    return np.where(rare, pooled, ids)


def pool_rows(train, val) -> dict:
    """dict kind -> the training rows, then the validation rows (dense or sparse)."""
    pooled = {}
    for kind, rows in train.items():
        if sparse.issparse(rows):
            pooled[kind] = sparse.vstack([rows, val[kind]], format="csr")
        else:
            pooled[kind] = np.concatenate([np.asarray(rows), np.asarray(val[kind])])
    return pooled


def cross_validate(features, labels, kinds, hidden_size, folds, **fit_kwargs) -> dict:
    """How well `kinds` classify held-out rows, over `folds`, and the C that does best.

    Args:
      features: dict kind -> [N, H] features (`tfidf`: sparse [N, V]).
      labels: [N] classes or [N, L] 0/1 labels.
      kinds, hidden_size: the kinds to concatenate, and the model's units.
      folds: (fit rows, held-out rows) pairs (`cross_validation_folds`).
      **fit_kwargs: passed to `fit_logistic`; a `title` names the progress lines.

    Returns:
      dict {score, C, per_C, not_converged} averaged over the folds (ties: the
      smaller C); multi-label: Jaccard, and C, per_C, positive_rate per label.
    """
    x = features_lib.concat_features(features, kinds)
    labels = np.asarray(labels)
    per_c, scores, unconverged = {}, [], set()
    per_label = {}  # multi-label: label -> C -> held-out metric per fold
    rates = {}  # multi-label: label -> C -> share of held-out rows called positive per fold
    title = fit_kwargs.pop("title", None) or ",".join(kinds)
    for fold, (fit_rows, held_rows) in enumerate(folds, 1):
        classifier, sweep = fit_lib.fit_logistic(
            x[fit_rows],
            labels[fit_rows],
            x[held_rows],
            labels[held_rows],
            kinds,
            hidden_size,
            neurons=False,
            title=f"{title}, fold {fold} of {len(folds)}",
            **fit_kwargs,
        )
        scores.append(classifier.score(x[held_rows], labels[held_rows]))
        unconverged.update(row["C"] for row in sweep if not row["converged"])
        if labels.ndim == 1:
            for row in sweep:
                per_c.setdefault(row["C"], []).append(row["val_accuracy"])
        else:
            for row in sweep:
                value = next(v for k, v in row.items() if k.startswith("val_"))
                per_label.setdefault(row["label"], {}).setdefault(row["C"], []).append(value)
                rates.setdefault(row["label"], {}).setdefault(row["C"], []).append(
                    row["positive_rate"]
                )
    not_converged = sorted(unconverged)
    if per_label:
        means = {
            name: {c: float(np.mean(values)) for c, values in sorted(by_c.items())}
            for name, by_c in per_label.items()
        }
        label_c = tuple(max(by_c, key=by_c.get) for by_c in means.values())
        return {
            "score": float(np.mean(scores)),
            "C": label_c,
            "positive_rate": tuple(
                float(np.mean(rates[name][c])) for name, c in zip(means, label_c)
            ),
            "per_C": means,
            "not_converged": not_converged,
        }
    means = {c: float(np.mean(values)) for c, values in sorted(per_c.items())}
    best = max(means, key=means.get)  # the first (smallest) C of the best mean
    return {"score": means[best], "C": best, "per_C": means, "not_converged": not_converged}


def select_feature_kinds(
    train,
    train_y,
    val,
    val_y,
    hidden_size,
    groups=features_lib.FEATURE_GROUPS,
    folds=None,
    c_grid_of=None,
    **fit_kwargs,
) -> tuple[tuple, list]:
    """Chooses feature kinds by greedy forward selection of groups, while the score rises.

    Args:
      train, train_y: dict kind -> [N, H] training features (every kind in `groups`), [N] labels
        (or [N, L] 0/1 labels).
      val, val_y: dict kind -> [M, H] validation features, [M] labels (or [M, L]).
      hidden_size: the model's units.
      groups: tuples of kinds selected together (`features_lib.FEATURE_GROUPS`).
      folds: None (validation judges), or (fit, held-out) pairs over train then validation rows.
      c_grid_of: None, or a function of the kinds giving their C grid.
      **fit_kwargs: passed to `fit_logistic`.

    Returns:
      (kinds in `features.ALL_KINDS` order, one record per combination tried).
    """
    trials = []
    cache = {}
    # Greedy forward selection fits at most g + (g - 1) + ... + 1 combinations.
    most = len(groups) * (len(groups) + 1) // 2
    if folds is not None:
        pooled = pool_rows(train, val)
        pooled_y = np.concatenate([np.asarray(train_y), np.asarray(val_y)])
        cv_metric = "jaccard" if pooled_y.ndim == 2 else "accuracy"

    def score(chosen_groups):
        kinds = tuple(
            kind for kind in features_lib.ALL_KINDS if any(kind in group for group in chosen_groups)
        )
        kwargs = dict(fit_kwargs, c_grid=c_grid_of(kinds)) if c_grid_of else fit_kwargs
        title = f"feature group {len(trials) + 1} of at most {most} ({','.join(kinds)})"
        if folds is not None and kinds not in cache:
            checked = cross_validate(
                pooled, pooled_y, kinds, hidden_size, folds, title=title, **kwargs
            )
            cache[kinds] = checked["score"]
            trials.append(
                {
                    "kinds": list(kinds),
                    f"cv_{cv_metric}": checked["score"],
                    "C": checked["C"],
                    **{k: checked[k] for k in ("positive_rate",) if k in checked},
                    "per_C": checked["per_C"],
                    "folds": len(folds),
                    "not_converged": checked["not_converged"],
                }
            )
            logging.info(
                "Features %s: %d-fold cross-validated %s %.4f",
                ",".join(kinds),
                len(folds),
                cv_metric,
                checked["score"],
            )
        if kinds not in cache:
            val_x = features_lib.concat_features(val, kinds)
            classifier, sweep = fit_lib.fit_logistic(
                features_lib.concat_features(train, kinds),
                train_y,
                val_x,
                val_y,
                kinds,
                hidden_size,
                neurons=False,
                title=title,
                **kwargs,
            )
            cache[kinds] = classifier.score(val_x, val_y)
            metric = classifier.score_name
            trials.append(
                {
                    "kinds": list(kinds),
                    f"val_{metric}": cache[kinds],
                    "not_converged": sorted({r["C"] for r in sweep if not r["converged"]}),
                }
            )
            logging.info("Features %s: validation %s %.4f", ",".join(kinds), metric, cache[kinds])
        return cache[kinds], chosen_groups

    def best_of(options):
        # The first of equals wins: `groups` order, fewer groups first.
        best = None
        for option in options:
            scored = score(option)
            if best is None or scored[0] > best[0]:
                best = scored
        return best

    best_score, chosen = best_of((group,) for group in groups)
    while len(chosen) < len(groups):
        rest = [group for group in groups if group not in chosen]
        score_plus, groups_plus = best_of(chosen + (group,) for group in rest)
        if score_plus <= best_score:
            break
        best_score, chosen = score_plus, groups_plus
    kinds = tuple(kind for kind in features_lib.ALL_KINDS if any(kind in g for g in chosen))
    return kinds, trials
