"""Class probabilities of new text from a trained model: one function for both classifier kinds.

A classifier is either a logistic regression fitted by `tf-mlstm-transfer`
(a `classifier.json`) on the features of a trained or fine-tuned model, or
the head of a finished `tf-mlstm-finetune` run. `load_predictor` turns
either into one function of texts, which `tf-mlstm-classify` and
`tf_mlstm.load(...).classify` both call.
"""

from tf_mlstm import errors
from tf_mlstm import rundir
from tf_mlstm.transfer import features
from tf_mlstm.transfer import finetune
from tf_mlstm.transfer import logistic


def load_predictor(
    model_dir,
    classifier="",
    batch_size=features.DEFAULT_BATCH_SIZE,
    window=features.DEFAULT_WINDOW,
    precision="float32",
    model=None,
    allow_other_model=False,
):
    """The model of `model_dir` and a classifier, as one function of texts.

    Args:
      model_dir: a trained or fine-tuned run folder.
      classifier: a `classifier.json` of `tf-mlstm-transfer`; "" = the
        fine-tuned head of `model_dir` (a finished `tf-mlstm-finetune` run,
        which classifies in float32, texts cut to its `--max_length`).
      batch_size: texts per model call.
      window: bytes per model call (a classifier.json's features).
      precision: the concrete policy a classifier.json's features are computed
        in (float32: the numbers the exported SavedModel gives).
      model: the language model of `model_dir`, already loaded in
        `precision`, to reuse (a classifier.json only).
      allow_other_model: apply a classifier fitted on other weights than
        those of `model_dir` (with a warning) instead of refusing it.

    Returns:
      (predict, classes): `predict(texts)` of normalized texts gives
      (probabilities [N, K] (binary [N, 2]; multi-label [N, L]), labels: the
      predicted classes [N] (multi-label: [N, L] 0/1)); classes are the K
      class values (or L label names) of the probability columns.

    Raises:
      FileNotFoundError: a missing model or classifier.
      ValueError: a classifier that does not fit the model (another size, or
        other weights: `rundir.OtherModelError`), or no classifier
        and `model_dir` is not a finished fine-tuning run.
    """
    if not classifier:
        return _finetuned_predictor(model_dir, batch_size)
    fitted = logistic.LogisticClassifier.load(classifier)
    if model is None:
        model, _ = rundir.load_trained_model(model_dir, precision=precision)
    if model.hidden_size != fitted.hidden_size:
        raise errors.InvalidValueError(
            f"{classifier}: fitted on a {fitted.hidden_size}-unit model, but "
            f"{model_dir} has {model.hidden_size} units"
        )
    rundir.check_fitted_model(
        model, fitted.weights_sha256, classifier, model_dir, allow_other_model
    )
    # Callers that predict in chunks report progress for all of them, not each alone.
    featurizer = None
    if fitted.model_kinds:
        featurizer = features.TextFeaturizer(model, batch_size, window, fitted.model_kinds)

    def predict(texts):
        computed = featurizer(texts, progress=False) if featurizer is not None else {}
        if fitted.ngrams is not None:
            # The n-grams come from the vocabulary stored with the classifier.
            computed[features.NGRAM_KIND] = fitted.ngrams.transform(texts)
        x = features.concat_features(computed, fitted.feature_kinds)
        return fitted.predict_proba(x), fitted.predict(x)

    return predict, fitted.classes


def _finetuned_predictor(model_dir, batch_size):
    """`load_predictor` for the fine-tuned encoder and head of `model_dir`."""
    if not rundir.is_finetune_run(model_dir):
        raise errors.InvalidValueError(
            f"--model_dir={model_dir} is not a finished tf-mlstm-finetune run (no "
            f"{rundir.FINETUNE_CONFIG_FILE} and {rundir.RESULTS_FILE}); give "
            "--classifier=classifier.json for a tf-mlstm-transfer classifier"
        )
    tuned = finetune.load_finetuned_model(model_dir)

    def predict(texts):
        probabilities = tuned.predict_proba(texts, batch_size)
        return probabilities, tuned.predict(probabilities)

    return predict, tuned.classes
