"""Features of labeled text from a trained language model, for transfer.

`TextFeaturizer` runs a model over a list of (normalized) texts and returns
the features `tf_mlstm.models.featurize.featurize_ids` computes: the final
cell and hidden states and statistics of the hidden and cell states over the
text (`FEATURE_KINDS`), [N, H] each. Texts are sorted by length and batched,
so a batch holds texts of similar length and little padding; the results
come back in the input order. The padding is masked, so a text's features do
not depend on the batch it ran in. The model runs in windows of 256 bytes
with the state carried, in an inference-only compiled function (no gradient
tape, no training-mode paths). Progress is reported through
`tf_mlstm.progress`.

`measured_precision` is `--precision=auto` for featurization: the policy
whose featurization step runs fastest on this machine at the batch shape,
timed like a training run's `auto` (`tf_mlstm.train.autotune`) and cached.

A feature spec names which kinds to concatenate ("cell", "cell,mean", ...),
or "auto" to choose a combination of `FEATURE_GROUPS` on validation data
(`tf_mlstm.transfer.probe.selection.select_feature_kinds`). One more kind,
`tfidf` (`NGRAM_KIND`), is not the model's: TF-IDF of word uni- and bigrams
(`tf_mlstm.transfer.ngrams`), fitted on the training texts; it can stand
alone ("tfidf"), join model kinds ("cell_mean,tfidf"), or join the choice
("auto,tfidf": `auto` then also weighs the n-grams as a group of their own,
alone or beside the model's features).
"""

import numpy as np
import tensorflow as tf
from absl import logging
from scipy import sparse

from tf_mlstm import errors
from tf_mlstm import rundir
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
from tf_mlstm.train import autotune
from tf_mlstm.train import hardware

FEATURE_GROUPS = (
    ("cell", "hidden"),
    ("mean", "max", "min", "std"),
    ("cell_mean", "cell_max", "cell_min"),
)
"""The units of `--features=auto`'s selection: the final state, statistics of
the hidden state, statistics of the cell state. Selecting among 3 groups takes
at most 6 fits, where selecting among the 9 kinds takes up to 45."""
NGRAM_GROUP = (NGRAM_KIND,)


def resolve_precision(
    choice, model_dir=None, batch_size=DEFAULT_BATCH_SIZE, window=DEFAULT_WINDOW
) -> str:
    """The policy features are computed in: `choice`, or for `auto` this machine's choice.

    Args:
      choice: float32, mixed_bfloat16, mixed_float16, or auto: measured for
        `model_dir`'s model at this batch shape (`measured_precision`), or,
        without a model, the hardware table's choice (mixed_float16 on GPUs
        with tensor cores, mixed_bfloat16 on CPUs with AMX bfloat16 units,
        else float32). Logged with the reason.
      model_dir: the trained model's run folder, or None.
      batch_size: texts per model call.
      window: bytes per model call.

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
      features: dict of [N, H] arrays keyed by kind (a `TextFeaturizer`
        result), and for `tfidf` a scipy sparse [N, V] matrix.
      kinds: the kinds to use (`tfidf`, if there, last).

    Returns:
      float32 [N, H * len(kinds)]; column `k * H + u` is unit u of `kinds[k]`.
      With `tfidf`: a scipy CSR matrix whose last V columns are the n-grams.

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
      index: a column of the concatenated features.
      kinds: the concatenated kinds.
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
      kinds: which features to keep (all are computed together; keeping fewer
        saves host memory on large data sets).
      progress_interval_s: seconds between progress log lines when stderr is
        not a terminal.

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
          progress: False: report nothing. Otherwise (None too) the progress
            in characters, as the cost of a text grows with its length: a bar
            on stderr when it is a terminal, else a log line every
            `progress_interval_s` seconds and one at the end.

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
) -> tuple[str, autotune.Choice]:
    """The policy `model_dir`'s model featurizes fastest in here: `--precision=auto`.

    Every policy the hardware computes natively (`autotune.native_precisions`)
    featurizes a few batches of `batch_size` one-window texts; the fastest is
    kept and cached per machine kind, TensorFlow version and shape, so the
    next call returns at once. The table's choice is the prior: measured
    first, and kept when nothing else runs. (Featurization is not
    XLA-compiled, so precision is the only setting.)

    Args:
      model_dir: a tf-mlstm-train (or fine-tuning init) `--model_dir`.
      batch_size: texts per model call.
      window: bytes per model call.
      machine: a `hardware.Hardware`; None detects this machine.
      cache: an `autotune.Cache`; None uses the user's cache folder.
      clock: seconds (tests pass a fake); None is `time.perf_counter`.

    Returns:
      (precision, `autotune.Choice`).
    """
    machine = machine or hardware.detect()
    prior, _ = hardware.resolve_precision(hardware.AUTO, machine)
    precisions = autotune.native_precisions(machine)
    ordered = [prior] + [p for p in precisions if p != prior]
    candidates = [autotune.Candidate(p, False) for p in ordered]
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
    choice = autotune.choose(
        candidates,
        build,
        batch_size * window,
        cache=cache or autotune.Cache(),
        key=autotune.cache_key(machine, True, shape),
        **options,
    )
    logging.info(
        "Features in %s (auto: %s); %s.",
        choice.candidate.precision,
        choice.reason(),
        machine.describe(),
    )
    return choice.candidate.precision, choice
