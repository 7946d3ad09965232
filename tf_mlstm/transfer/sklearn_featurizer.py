"""A scikit-learn transformer: texts in, a trained model's features out.

`MLSTMFeaturizer` makes a trained model one step of a `Pipeline`. It learns nothing from the
data: `fit` loads the model, and a pickled featurizer holds its parameters only.
"""

from typing import Self

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.base import TransformerMixin

from tf_mlstm import errors
from tf_mlstm.data.text import normalize_text
from tf_mlstm.models import language_model
from tf_mlstm.transfer import features as features_lib


class MLSTMFeaturizer(TransformerMixin, BaseEstimator):
    """Features of raw texts from a trained run folder, as a scikit-learn transformer.

    Args:
      model_dir: a `tf-mlstm-train` (or `tf-mlstm-finetune`) model folder.
      features: comma-separated kinds (`FEATURE_KINDS` order); "auto" needs labels: refused.
      batch_size, window: texts and bytes per model call (the state carries across windows).
      precision: the policy the model runs in ("float32" or a mixed one).
      normalize: normalize texts as training text was; False if already normalized.

    Example:
    >>> from sklearn.linear_model import LogisticRegression
    >>> from sklearn.pipeline import make_pipeline
    >>> from tf_mlstm.transfer.sklearn_featurizer import MLSTMFeaturizer
    >>> pipeline = make_pipeline(MLSTMFeaturizer(model_dir), LogisticRegression())  # a run folder
    >>> _ = pipeline.fit(["Great phone.", "Broke in a day.", "Love it.", "Awful."], [1, 0, 1, 0])
    >>> pipeline.predict_proba(["Works well."]).shape
    (1, 2)
    """

    def __init__(
        self,
        model_dir,
        features="cell",
        batch_size=features_lib.DEFAULT_BATCH_SIZE,
        window=features_lib.DEFAULT_WINDOW,
        precision="float32",
        normalize=True,
    ):
        self.model_dir = model_dir
        self.features = features
        self.batch_size = batch_size
        self.window = window
        self.precision = precision
        self.normalize = normalize

    def _kinds(self):
        kinds = features_lib.parse_feature_kinds(self.features)
        if kinds in (features_lib.AUTO, features_lib.AUTO_NGRAMS):
            raise errors.InvalidValueError(
                "MLSTMFeaturizer: features='auto' chooses on labeled validation data "
                "(tf-mlstm-transfer); name the kinds, e.g. 'cell' or 'cell_mean,cell_max'"
            )
        if features_lib.NGRAM_KIND in kinds:
            raise errors.InvalidValueError(
                "MLSTMFeaturizer: features='tfidf' is fitted on text, not computed by the model; "
                "put scikit-learn's TfidfVectorizer beside it (a FeatureUnion)"
            )
        return kinds

    def _featurizer(self):
        """The `TextFeaturizer` for the current parameters, loaded once."""
        key = (self.model_dir, self._kinds(), self.batch_size, self.window, self.precision)
        if getattr(self, "_loaded", (None,))[0] != key:
            model = language_model.MLSTMLanguageModel.from_run(
                self.model_dir, precision=self.precision
            )
            featurizer = features_lib.TextFeaturizer(
                model, self.batch_size, self.window, self._kinds()
            )
            self._loaded = (key, featurizer)
        return self._loaded[1]

    def fit(self, X, y=None) -> Self:
        """Loads the model; nothing is learned from `X` or `y`.

        Returns:
          self.

        Raises:
          FileNotFoundError: `model_dir` holds no trained model.
          ValueError: a bad feature spec, batch size or window.
        """
        del X, y
        featurizer = self._featurizer()
        self.hidden_size_ = featurizer.hidden_size
        self.n_features_out_ = featurizer.hidden_size * len(featurizer.kinds)
        return self

    def transform(self, X) -> np.ndarray:
        """Features of the texts `X`: float32 [N, H * kinds], column `k * H + u` unit u of kind k.

        Raises:
          TypeError: an item that is not a string (naming its row).
        """
        texts = []
        for row, text in enumerate(np.asarray(X, dtype=object).reshape(-1)):
            if not isinstance(text, str):
                raise TypeError(
                    f"MLSTMFeaturizer takes texts (str), got {type(text).__name__} at row {row}"
                )
            texts.append(normalize_text(text) if self.normalize else text)
        featurizer = self._featurizer()
        return features_lib.concat_features(featurizer(texts, progress=False), featurizer.kinds)

    def get_feature_names_out(self, input_features=None) -> np.ndarray:
        """Names of the output columns: "<kind>_<unit>"."""
        del input_features
        featurizer = self._featurizer()
        return np.array(
            [
                f"{kind}_{unit}"
                for kind in featurizer.kinds
                for unit in range(featurizer.hidden_size)
            ],
            dtype=object,
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        tags.requires_fit = False
        return tags

    def __getstate__(self):
        # The Keras model does not pickle; it is loaded again when next used.
        state = dict(self.__dict__)
        state.pop("_loaded", None)
        return state
