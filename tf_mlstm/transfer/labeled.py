"""Labeled text for transfer and fine-tuning: reading, splits, metrics, thresholds.

An absent or unreadable label is skipped and counted; a readable value the
settings do not allow is an error naming file and line (docs/transfer.md).
"""

import dataclasses

import numpy as np
from absl import logging
from sklearn import metrics as sk_metrics
from sklearn.model_selection import train_test_split

from tf_mlstm import errors
from tf_mlstm.config.choices import THRESHOLD_METRICS  # noqa: F401
from tf_mlstm.config.transfer import LABEL_MAP_EXAMPLE  # noqa: F401
from tf_mlstm.config.transfer import LabelMap  # noqa: F401
from tf_mlstm.config.transfer import parse_label_map
from tf_mlstm.data import readers

# === Reading ===


@dataclasses.dataclass(frozen=True)
class LabeledData:
    """Normalized texts and their labels, from one input spec.

    Attributes:
      source: the input spec (files/globs).
      texts: normalized texts.
      labels: one key: [N] classes (int64, or str of a label map); several: [N, L] int64 0/1.
      label_keys: the label keys, in order.
      places: (file, line) of each row, for error messages.
      skipped: the skip counts (`readers.SkipLog.to_dict`).
      class_order: the label map's classes in its order (None: no map).

    Example:
    >>> import numpy as np
    >>> from tf_mlstm.transfer.labeled import LabeledData
    >>> data = LabeledData(
    ...     source="reviews.csv", texts=["good", "bad", "fine"], labels=np.array([1, 0, 1]),
    ...     label_keys=("label",), places=[("reviews.csv", line) for line in (2, 3, 4)],
    ...     skipped={},
    ... )
    >>> data.classes(), len(data.subset([0, 2]))
    ((0, 1), 2)
    """

    source: str
    texts: list
    labels: np.ndarray
    label_keys: tuple
    places: list
    skipped: dict
    class_order: tuple | None = None

    @property
    def multilabel(self) -> bool:
        """Whether each text has several 0/1 labels (several label keys)."""
        return len(self.label_keys) > 1

    def __len__(self):
        return len(self.texts)

    def subset(self, rows) -> "LabeledData":
        """The rows `rows` (indices), in that order, as a new `LabeledData`."""
        rows = np.asarray(rows, np.int64)
        return dataclasses.replace(
            self,
            texts=[self.texts[i] for i in rows],
            labels=self.labels[rows],
            places=[self.places[i] for i in rows],
        )

    def classes(self) -> tuple:
        """The classes present, in the label map's order, else sorted (one label key)."""
        present = set(np.unique(self.labels).tolist())
        if self.class_order is not None:
            return tuple(c for c in self.class_order if c in present)
        return tuple(sorted(present))

    def indicator(self) -> np.ndarray:
        """[N, L] float32 0/1 targets (several keys, or one key of 0/1 labels).

        Raises:
          ValueError: one label key with classes other than 0 and 1.
        """
        if self.multilabel:
            return self.labels.astype(np.float32)
        extra = sorted(set(self.classes()) - {0, 1}, key=str)
        if extra:
            raise errors.InvalidValueError(f"{self.source}: labels {extra[:10]} are not 0/1")
        return self.labels.reshape(-1, 1).astype(np.float32)

    def summary(self) -> dict:
        """Counts for results.json: examples, per class (or per label) counts, skips."""
        if self.multilabel:
            counts = {key: int(n) for key, n in zip(self.label_keys, self.labels.sum(axis=0))}
        else:
            values, numbers = np.unique(self.labels, return_counts=True)
            counts = {str(v): int(n) for v, n in zip(values.tolist(), numbers)}
        return {
            "source": self.source,
            "examples": len(self.texts),
            "label_counts": counts,
            "skipped": self.skipped,
        }


def read_labeled(
    spec, text_keys, label_keys, threshold=None, label_map=None, binary=False, limit=0, seed=0
) -> LabeledData:
    """Reads texts and their labels from CSV / JSON lines files.

    Args:
      spec: comma-separated files or globs (see `readers.expand_inputs`).
      text_keys: keys/columns of the text, the first present wins.
      label_keys: one label key (a class per text), or several (0/1 each: multi-label).
      threshold: None, or a score cut: a label is 1 when >= threshold, else 0.
      label_map: None, a `LabelMap`, or a spec for `parse_label_map`.
      binary: require 0/1 labels with one key too (fine-tuning's sigmoid).
      limit, seed: keep a seeded random subset of `limit` rows, in file order (0 = all).

    Returns:
      A `LabeledData`.

    Raises:
      FileNotFoundError: a file or glob names nothing.
      ValueError: a bad label map, a threshold with a label map, a disallowed value, no record.
    """
    keys = (label_keys,) if isinstance(label_keys, str) else tuple(label_keys)
    if not keys:
        raise errors.InvalidValueError("no label key given")
    if isinstance(label_map, str) or label_map is None:
        label_map = parse_label_map(label_map)
    if label_map is not None and threshold is not None:
        raise errors.InvalidValueError(
            "a label map and a label threshold cannot be combined: choose one"
        )
    parse = _LabelParser(keys, threshold, label_map, binary or len(keys) > 1)
    skip_log = readers.SkipLog(max_examples=1)
    paths = readers.expand_inputs(spec)
    texts, rows, places = [], [], []
    for doc in readers.read_documents(paths, text_keys, skip_log=skip_log, keep_keys=keys):
        row = parse(doc, skip_log)
        if row is not None:
            texts.append(doc.text)
            rows.append(row)
            places.append((doc.source, doc.line))
    skip_log.log_summary()
    if not texts:
        first = next(iter(skip_log.examples.values()), ["(empty)"])[0]
        what = f"label {keys[0]!r}" if len(keys) == 1 else f"labels {list(keys)}"
        raise errors.InvalidValueError(
            f"{spec}: no usable record with text {list(text_keys)} and {what} "
            f"(skipped {skip_log.total}: {skip_log.counts}; first: {first})"
        )
    logging.info("Read %d labeled texts from %s", len(texts), spec)
    if len(keys) > 1:
        labels = np.array(rows, np.int64)
    else:
        values = [row[0] for row in rows]
        kind = np.int64 if all(isinstance(v, int) for v in values) else object
        labels = np.array(values, kind)
    order = label_map.classes if label_map is not None else None
    data = LabeledData(spec, texts, labels, keys, places, skip_log.to_dict(), order)
    if 0 < limit < len(texts):
        data = data.subset(random_subsample(len(texts), limit, seed))
        logging.info("Kept a seeded random %d of them (seed %d)", limit, seed)
    return data


class _LabelParser:
    """One document's labels, or None after counting why it was skipped."""

    def __init__(self, keys, threshold, label_map, binary):
        self.keys = keys
        self.threshold = threshold
        self.label_map = label_map
        self.binary = binary

    def __call__(self, doc, skip_log):
        row = []
        for key, value in zip(self.keys, doc.kept):
            label = self._label(key, value, doc, skip_log)
            if label is None:
                return None
            row.append(label)
        return row

    def _label(self, key, value, doc, skip_log):
        scored = self.threshold is not None
        if value is None:
            reason, noun = (
                (readers.MISSING_RATING, "rating") if scored else (readers.MISSING_LABEL, "label")
            )
            skip_log.add(reason, doc.source, doc.line, f"no {noun} key {key!r}")
            return None
        if self.label_map is not None:
            label = self.label_map.lookup(value)
            if label is None:
                raise errors.InvalidValueError(
                    f"{doc.source}:{doc.line}: {key!r} is {value!r}, which "
                    f"{errors.setting_name('label_map')} does not "
                    f"name (it names {', '.join(self.label_map.values())})"
                )
        else:
            try:
                if scored:
                    label = int(readers.parse_rating(value) >= self.threshold)
                else:
                    label = readers.parse_label(value)
            except ValueError as e:
                reason = readers.BAD_RATING if scored else readers.BAD_LABEL
                skip_log.add(reason, doc.source, doc.line, f"{key!r}: {e}")
                return None
        if self.binary and label not in (0, 1):
            raise errors.InvalidValueError(
                f"{doc.source}:{doc.line}: label {key!r} is {label!r}; each label key here takes "
                "0/1 labels (several label keys, or fine-tuning)"
            )
        return label


def encode_classes(data, classes) -> np.ndarray:
    """The class indices [N] of `data`'s labels in `classes`.

    Args:
      data, classes: a single-label `LabeledData`, and the classes (the training data's).

    Returns:
      int64 [N] indices into `classes`.

    Raises:
      ValueError: a label not among `classes`, naming its file and line.
    """
    index = {value: i for i, value in enumerate(classes)}
    out = np.empty(len(data), np.int64)
    for row, value in enumerate(data.labels.tolist()):
        if value not in index:
            path, line = data.places[row]
            raise errors.InvalidValueError(
                f"{path}:{line}: label {value!r} is not among the training classes {list(classes)}"
            )
        out[row] = index[value]
    return out


# === Splits and subsamples ===


def strata(labels) -> np.ndarray:
    """One stratum id per row (class or label combination), single-row strata pooled."""
    labels = np.asarray(labels)
    if labels.ndim == 2:
        labels = [tuple(row) for row in labels.astype(np.int64).tolist()]
    else:
        labels = labels.tolist()
    _, ids, counts = np.unique(
        np.array([str(v) for v in labels]), return_inverse=True, return_counts=True
    )
    rare = counts[ids] < 2
    if rare.sum() == 1:
        ids = np.where(rare, np.argmax(counts), ids)
    elif rare.any():
        ids = np.where(rare, -1, ids)
    return ids


def stratified_split(labels, fraction, seed) -> tuple[np.ndarray, np.ndarray]:
    """Splits row indices into (kept, held out) with the class proportions kept.

    Args:
      labels: [N] classes or [N, L] 0/1 labels.
      fraction, seed: share held out, in (0, 1), and the shuffle seed.

    Returns:
      (kept indices, held-out indices), each sorted.

    Raises:
      ValueError: a fraction outside (0, 1), or fewer than two rows.
    """
    if not 0 < fraction < 1:
        raise errors.InvalidValueError(f"the held-out fraction must be in (0, 1), got {fraction}")
    ids = strata(labels)
    rows, groups = len(ids), len(np.unique(ids))
    if rows < 2:
        raise errors.InvalidValueError(
            f"{rows} example is too few to hold out a validation share; give a validation file"
        )
    # Every stratum has two rows or more, so both sides can have one of each.
    held = min(max(int(round(rows * fraction)), groups), rows - groups)
    kept, out = train_test_split(
        np.arange(rows), test_size=held, random_state=seed, shuffle=True, stratify=ids
    )
    return np.sort(kept), np.sort(out)


def split_off(data, fraction, seed) -> tuple[LabeledData, LabeledData]:
    """(kept, held-out) `LabeledData` from `stratified_split` of `data`'s labels."""
    kept, held = stratified_split(data.labels, fraction, seed)
    return data.subset(kept), data.subset(held)


def balanced_subsample(labels, count, seed) -> np.ndarray:
    """A seeded subsample of `count` rows, as even across classes as possible.

    Args:
      labels: [N] labels (or stratum ids).
      count, seed: rows wanted (>= number of classes), and the sampling seed.

    Returns:
      Sorted row indices; all rows when `count >= N`.
    """
    labels = np.asarray(labels)
    if count >= len(labels):
        return np.arange(len(labels))
    rng = np.random.default_rng(seed)
    pools = [list(rng.permutation(np.flatnonzero(labels == value))) for value in np.unique(labels)]
    chosen = []
    # Round-robin over the classes, so each gets count / classes rows, and a
    # class that runs out leaves its share to the others.
    while len(chosen) < count:
        for pool in pools:
            if pool and len(chosen) < count:
                chosen.append(pool.pop())
    return np.sort(np.asarray(chosen, np.int64))


def random_subsample(count, limit, seed) -> np.ndarray:
    """Seeded sorted indices of `limit` of `count` rows (all when limit <= 0)."""
    if limit <= 0 or limit >= count:
        return np.arange(count)
    return np.sort(np.random.default_rng(seed).choice(count, limit, replace=False))


# === Metrics ===


def class_metrics(true, predicted, classes) -> dict:
    """Single-label metrics (scikit-learn's) of predicted class indices.

    Args:
      true, predicted: [N] class indices.
      classes: the K classes the indices stand for.

    Returns:
      dict: `examples`, `accuracy`, `macro_f1`, `per_class`; binary also `f1`.
    """
    indices = list(range(len(classes)))
    precision, recall, f1, support = sk_metrics.precision_recall_fscore_support(
        true, predicted, labels=indices, zero_division=0
    )
    result = {
        "examples": int(len(true)),
        "accuracy": float(sk_metrics.accuracy_score(true, predicted)),
        "macro_f1": float(np.mean(f1)),
        "per_class": {
            str(name): {
                "precision": float(precision[k]),
                "recall": float(recall[k]),
                "f1": float(f1[k]),
                "support": int(support[k]),
            }
            for k, name in enumerate(classes)
        },
    }
    if len(classes) == 2:
        result["f1"] = float(f1[1])
    return result


def label_metrics(true, predicted, names, thresholds=None) -> dict:
    """Metrics (scikit-learn's) of 0/1 labels: one binary label or several.

    Args:
      true, predicted: [N, L] 0/1 targets and predictions.
      names, thresholds: the L label names, and the thresholds the predictions came from.

    Returns:
      dict: `examples`, `accuracy`, `f1`; several labels add `exact_match`, `jaccard`,
      `micro_f1`, `macro_f1`, `per_label`.
    """
    true = np.asarray(true).astype(np.int64)
    predicted = np.asarray(predicted).astype(np.int64)
    precision, recall, f1, support = sk_metrics.precision_recall_fscore_support(
        true, predicted, average=None, zero_division=0
    )
    accuracy = np.mean(true == predicted, axis=0)
    result = {
        "examples": int(len(true)),
        "accuracy": float(1.0 - sk_metrics.hamming_loss(true, predicted)),
    }
    if len(names) == 1:
        result["f1"] = float(f1[0])
        return result
    micro = float(sk_metrics.f1_score(true, predicted, average="micro", zero_division=0))
    result.update(
        f1=micro,
        exact_match=float(sk_metrics.accuracy_score(true, predicted)),
        jaccard=float(
            sk_metrics.jaccard_score(true, predicted, average="samples", zero_division=1.0)
        ),
        micro_f1=micro,
        macro_f1=float(np.mean(f1)),
        per_label={
            name: {
                "precision": float(precision[k]),
                "recall": float(recall[k]),
                "f1": float(f1[k]),
                "accuracy": float(accuracy[k]),
                "support": int(support[k]),
                **({} if thresholds is None else {"threshold": float(thresholds[k])}),
            }
            for k, name in enumerate(names)
        },
    )
    return result


# === Thresholds ===


def choose_threshold(scores, labels, metric="accuracy") -> float:
    """The threshold on `scores` that maximizes `metric` for 0/1 `labels` (ties: closest to 0.5).

    Args:
      scores, labels: [N] probabilities (or any scores), and 0/1 targets.
      metric: "accuracy" or "f1".

    Returns:
      The threshold (predict 1 where score > threshold), a float.

    Raises:
      ValueError: an unknown metric.
    """
    if metric not in THRESHOLD_METRICS:
        raise errors.InvalidValueError(
            f"metric must be one of {THRESHOLD_METRICS}, got {metric!r}."
        )
    scores = np.asarray(scores, np.float64)
    labels = np.asarray(labels).astype(np.int64)
    positives = int(labels.sum())
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        # One class only: predict it everywhere (no cut can do better).
        low, high = scores.min(initial=0.5), scores.max(initial=0.5)
        if positives == 0:
            return float(max(0.5, high))
        return float(0.5 if low > 0.5 else low - 1e-6)
    fpr, tpr, cuts = sk_metrics.roc_curve(labels, scores, drop_intermediate=False)
    # Cut i predicts 1 where score >= cuts[i] (cuts[0] is +inf: nothing);
    # "score > t" predicts the same for every t in [cuts[i + 1], cuts[i]).
    true_pos = tpr * positives
    false_pos = fpr * negatives
    if metric == "accuracy":
        score = (true_pos + negatives - false_pos) / len(labels)
    else:
        score = 2 * true_pos / np.maximum(true_pos + false_pos + positives, 1e-12)
    upper = cuts
    lower = np.append(cuts[1:], -np.inf)
    inside = (lower <= 0.5) & (0.5 < upper)
    middle = np.where(
        np.isinf(upper), lower, np.where(np.isinf(lower), upper - 1e-6, (upper + lower) / 2)
    )
    place = np.where(inside, 0.5, middle)
    best = np.flatnonzero(score >= score.max() - 1e-12)
    return float(place[best[np.argmin(np.abs(place[best] - 0.5))]])


def threshold_at_rate(scores, rate) -> float:
    """The threshold on `scores` above which a `rate` share of them lies.

    Args:
      scores: [N] probabilities (or any scores).
      rate: the share of rows to call positive, in [0, 1].

    Returns:
      The threshold, midway between the round(rate N)-th highest score and the next.
    """
    scores = np.sort(np.asarray(scores, np.float64))[::-1]
    count = int(round(float(rate) * len(scores)))
    if count <= 0:
        return float(scores[0]) if len(scores) else 0.5
    if count >= len(scores):
        return float(scores[-1] - 1e-6)
    return float((scores[count - 1] + scores[count]) / 2)


def choose_thresholds(probabilities, labels, metric="accuracy") -> np.ndarray:
    """One `choose_threshold` per label (column).

    Args:
      probabilities, labels: [N, L] predicted probabilities, and 0/1 targets.
      metric: "accuracy" or "f1".

    Returns:
      [L] float thresholds (predict positive where probability > threshold).
    """
    probabilities = np.asarray(probabilities)
    labels = np.asarray(labels)
    return np.array(
        [
            choose_threshold(probabilities[:, k], labels[:, k], metric)
            for k in range(labels.shape[1])
        ]
    )
