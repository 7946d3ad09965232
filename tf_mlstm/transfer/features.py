"""Features of labeled text from a trained language model, for transfer.

`TextFeaturizer` runs a model over texts and returns `FEATURE_KINDS` in input order;
`measured_precision` is `--precision=auto` for featurization. A feature spec names kinds to
concatenate, or "auto" (`FEATURE_GROUPS` chosen on validation); `tfidf` is word n-grams.
"""

import numpy as np
import tensorflow as tf
from absl import logging
from scipy import sparse

from tf_mlstm import errors
from tf_mlstm import rundir
from tf_mlstm.auto import hardware
from tf_mlstm.auto import measure
from tf_mlstm.config.choices import ALL_KINDS  # noqa: F401 (callers read it here)
from tf_mlstm.config.choices import AUTO
from tf_mlstm.config.choices import AUTO_NGRAMS
from tf_mlstm.config.transfer import FEATURE_BATCH_SIZE as DEFAULT_BATCH_SIZE
from tf_mlstm.config.transfer import FEATURE_WINDOW as DEFAULT_WINDOW
from tf_mlstm.config.transfer import parse_feature_kinds  # noqa: F401 (callers read it here)
from tf_mlstm.data.words import NGRAM_KIND
from tf_mlstm.models import featurize
from tf_mlstm.models import language_model
from tf_mlstm.models.kinds import FEATURE_KINDS
from tf_mlstm.models.preprocessor import BytePreprocessor
from tf_mlstm.progress import DEFAULT_LOG_INTERVAL_S
from tf_mlstm.progress import Progress

FEATURE_GROUPS = (
    ("cell", "hidden"),
    ("mean", "max", "min", "std"),
    ("cell_mean", "cell_max", "cell_min"),
)
"""The units of `--features=auto`'s selection: the final state, statistics of
the hidden state, statistics of the cell state. Selecting among 3 groups takes
at most 6 fits, where selecting among the 9 kinds takes up to 45."""
NGRAM_GROUP = (NGRAM_KIND,)


def classifier_precision(choice, classifier=None) -> str:
    """The policy a classifier is applied in: one rule for the CLI and the Python API.

    Args:
      choice: the policy asked for (a name, or auto), or None / "" for the default.
      classifier: the `LogisticClassifier` to apply, or None.

    Returns:
      `choice` when given; else the policy the classifier's features were fitted in; else float32.

    Example:
    >>> from tf_mlstm.transfer.features import classifier_precision
    >>> classifier_precision(None), classifier_precision("auto")
    ('float32', 'auto')
    """
    if choice:
        return choice
    fitted = classifier.head.precision if classifier is not None else ""
    return fitted or "float32"


def resolve_precision(
    choice, model_dir=None, batch_size=DEFAULT_BATCH_SIZE, window=DEFAULT_WINDOW
) -> str:
    """The policy features are computed in: `choice`, or for `auto` this machine's choice.

    Args:
      choice: a policy, or auto: `measured_precision`, else the hardware table's.
      model_dir: the trained model's run folder, or None.
      batch_size, window: texts and bytes per model call.

    Returns:
      A concrete policy name.
    """
    if choice != hardware.AUTO:
        return choice
    if model_dir is not None:
        precision, _ = measured_precision(model_dir, batch_size, window)
        return precision
    machine = hardware.detect()
    precision, reason = hardware.resolve_precision(choice, machine)
    logging.info("Features in %s (auto: %s); %s.", precision, reason, machine.describe())
    return precision


def kinds_to_compute(spec) -> tuple[tuple[str, ...], bool]:
    """(model kinds, whether the n-grams are needed) for a parsed spec."""
    if spec in (AUTO, AUTO_NGRAMS):
        return FEATURE_KINDS, spec == AUTO_NGRAMS
    return tuple(k for k in spec if k != NGRAM_KIND), NGRAM_KIND in spec


def concat_features(features, kinds) -> np.ndarray | sparse.csr_matrix:
    """Concatenates the chosen kinds, in order, into one [N, H * len(kinds)] array.

    Args:
      features: dict kind -> [N, H] arrays; for `tfidf` a scipy sparse [N, V] matrix.
      kinds: the kinds to use (`tfidf`, if there, last).

    Returns:
      float32 [N, H * len(kinds)], column `k * H + u` unit u of `kinds[k]`; CSR with `tfidf`.

    Raises:
      KeyError: a kind missing from `features`.
    """
    missing = [kind for kind in kinds if kind not in features]
    if missing:
        raise KeyError(f"features {missing} were not computed (have {sorted(features)})")
    dense = [np.asarray(features[kind], np.float32) for kind in kinds if kind != NGRAM_KIND]
    if NGRAM_KIND not in kinds:
        return np.concatenate(dense, axis=1)
    ngrams = sparse.csr_matrix(features[NGRAM_KIND], dtype=np.float32)
    if not dense:
        return ngrams
    return sparse.hstack([sparse.csr_matrix(np.concatenate(dense, axis=1)), ngrams], format="csr")


def describe_feature(index, kinds, hidden_size) -> tuple[str, int]:
    """Which kind and unit column `index` of `concat_features(..., kinds)` is.

    Args:
      index, kinds: a column of the concatenated features, and their kinds.
      hidden_size: the model's units.

    Returns:
      (kind, unit); for the n-grams (last), ("tfidf", the term's column).
    """
    dense = hidden_size * sum(kind != NGRAM_KIND for kind in kinds)
    if index >= dense:
        return NGRAM_KIND, index - dense
    return kinds[index // hidden_size], index % hidden_size


def text_lengths(texts) -> np.ndarray:
    """UTF-8 byte lengths of `texts` (what the model runs over)."""
    return np.array([len(text.encode("utf-8")) for text in texts], np.int64)


class TextFeaturizer:
    """Computes the features of lists of texts with one model.

    Args:
      model: an `MLSTMLanguageModel` (float32 from `MLSTMLanguageModel.from_run`).
      batch_size: texts per model call (memory grows with batch x window x H).
      window: bytes per model call; the state carries across windows.
      kinds: which features to keep (keeping fewer saves host memory).
      progress_interval_s: seconds between progress log lines when stderr is not a terminal.

    Raises:
      ValueError: a non-positive batch size or window, or an unknown kind.

    Example:
    >>> from tf_mlstm.models.language_model import MLSTMLanguageModel
    >>> from tf_mlstm.transfer.features import TextFeaturizer
    >>> model = MLSTMLanguageModel.from_run(model_dir)  # a tf-mlstm-train run folder
    >>> features = TextFeaturizer(model, kinds=("mean", "cell"))(["Great phone.", "Broke."])
    >>> {kind: values.shape for kind, values in features.items()}
    {'mean': (2, 16), 'cell': (2, 16)}
    """

    def __init__(
        self,
        model,
        batch_size=DEFAULT_BATCH_SIZE,
        window=DEFAULT_WINDOW,
        kinds=FEATURE_KINDS,
        progress_interval_s=DEFAULT_LOG_INTERVAL_S,
    ):
        if batch_size <= 0 or window <= 0:
            raise errors.InvalidValueError(
                f"batch_size and window must be positive, got {batch_size}, {window}"
            )
        unknown = [kind for kind in kinds if kind not in FEATURE_KINDS]
        if unknown:
            raise errors.InvalidValueError(
                f"unknown feature kinds {unknown}; choose from {list(FEATURE_KINDS)}"
            )
        self.model = model
        self.batch_size = int(batch_size)
        self.window = int(window)
        self.kinds = tuple(kinds)
        self.hidden_size = model.hidden_size
        self.progress_interval_s = progress_interval_s

        preprocessor = BytePreprocessor.for_windows(self.window)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
        def features_of(texts):
            framed = preprocessor(texts)
            features = featurize.featurize_ids(self.model, framed.ids, framed.valid, self.window)
            return {kind: features[kind] for kind in self.kinds}

        self._features_of = features_of

    def __call__(self, texts, progress=None):
        """Features of `texts`, in their order.

        Args:
          texts: a sequence of normalized texts (str); "" is allowed.
          progress: False: report nothing; else progress in characters.

        Returns:
          dict kind -> float32 [len(texts), H].
        """
        texts = list(texts)
        lengths = text_lengths(texts)
        order = np.argsort(lengths, kind="stable")
        out = {kind: np.zeros((len(texts), self.hidden_size), np.float32) for kind in self.kinds}
        with Progress(
            "Featurizing",
            int(lengths.sum()),
            "chars",
            log_interval_s=self.progress_interval_s,
            enabled=progress is not False,
        ) as report:
            for start in range(0, len(texts), self.batch_size):
                rows = order[start : start + self.batch_size]
                batch = self._features_of(tf.constant([texts[i] for i in rows], tf.string))
                for kind in self.kinds:
                    out[kind][rows] = batch[kind].numpy()
                done = start + len(rows)
                report.advance(int(lengths[rows].sum()), texts=f"{done:,}/{len(texts):,}")
        return out


def measured_precision(
    model_dir,
    batch_size=DEFAULT_BATCH_SIZE,
    window=DEFAULT_WINDOW,
    machine=None,
    cache=None,
    clock=None,
) -> tuple[str, measure.Choice]:
    """The policy `model_dir`'s model featurizes fastest in here: `--precision=auto`.

    Each native policy is timed on a few batches; the winner is cached per machine and shape.

    Args:
      model_dir: a tf-mlstm-train (or fine-tuning init) `--model_dir`.
      batch_size, window: texts and bytes per model call.
      machine, cache: a `hardware.Hardware` and a `measure.Cache`; None: this machine's, the
        user's.
      clock: seconds (tests pass a fake); None is `time.perf_counter`.

    Returns:
      (precision, `measure.Choice`).
    """
    machine = machine or hardware.detect()
    prior, _ = hardware.resolve_precision(hardware.AUTO, machine)
    precisions = measure.native_precisions(machine)
    ordered = [prior] + [p for p in precisions if p != prior]
    candidates = [measure.Candidate(p, False) for p in ordered]
    config = rundir.read_config(model_dir)
    shape = {
        "task": "featurize",
        "hidden_size": config.hidden_size,
        "embedding_size": config.embedding_size,
        "weight_norm": config.weight_norm,
        "rows": batch_size,
        "window": window,
    }
    # One window per text (the framing byte fills the last place): every
    # batch is the same full [rows, window] block.
    texts = ["a" * (window - 1)] * batch_size

    def build(candidate):
        model = language_model.MLSTMLanguageModel.from_run(model_dir, precision=candidate.precision)
        featurizer = TextFeaturizer(model, batch_size, window, kinds=("cell",))
        return lambda: featurizer(texts, progress=False)

    options = {"clock": clock} if clock else {}
    choice = measure.choose(
        candidates,
        build,
        batch_size * window,
        cache=cache or measure.Cache(),
        key=measure.cache_key(machine, True, shape),
        **options,
    )
    logging.info(
        "Features in %s (auto: %s); %s.",
        choice.candidate.precision,
        choice.reason(),
        machine.describe(),
    )
    return choice.candidate.precision, choice
