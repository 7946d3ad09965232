"""Word n-gram TF-IDF features: the one vectorizer of transfer and of the bag-of-words baseline.

scikit-learn's `TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)` over the words of
`tf_mlstm.data.words`, so the exported `classify` signature computes the same features.
"""

import dataclasses
from typing import Self

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import TfidfVectorizer

from tf_mlstm import errors
from tf_mlstm.data import words

NGRAM_KIND = words.NGRAM_KIND
VECTORIZER_SETTINGS = {"ngram_range": (1, words.MAX_N), "min_df": 1, "sublinear_tf": True}
"""The settings of the bag-of-words baseline: uni- and bigrams, sublinear tf, and
scikit-learn's other defaults (min_df=1: an n-gram of one training text is kept;
keeping only those of two or more cost 0.6-0.9 points of accuracy on 1,000-2,000
training texts, docs/transfer.md)."""


def _vectorizer(**overrides):
    # The words come from the TensorFlow tokenizer already lowercased and
    # joined by spaces: scikit-learn only splits them and forms the n-grams.
    settings = dict(
        VECTORIZER_SETTINGS, tokenizer=str.split, token_pattern=None, lowercase=False, **overrides
    )
    return TfidfVectorizer(**settings)


@dataclasses.dataclass(frozen=True, eq=False)
class NgramVocabulary:
    """A fitted TF-IDF vocabulary.

    Attributes:
      terms: the V n-grams (words joined by one space), in column order.
      idf: [V] inverse document frequencies, in the same order.

    Example:
    >>> from tf_mlstm.transfer.ngrams import fit_vocabulary
    >>> vocabulary, features = fit_vocabulary(["a good phone", "a bad phone"])
    >>> vocabulary.terms
    ('bad', 'bad phone', 'good', 'good phone', 'phone')
    >>> vocabulary.transform(["good good"]).shape
    (1, 5)
    """

    terms: tuple
    idf: np.ndarray

    def __len__(self):
        return len(self.terms)

    def transform(self, texts) -> sparse.csr_matrix:
        """TF-IDF features of normalized `texts`: scipy CSR float64 [N, V]."""
        vectorizer = _vectorizer(vocabulary=list(self.terms))
        vectorizer.idf_ = np.asarray(self.idf, np.float64)
        return vectorizer.transform(words.word_strings(texts))

    def to_record(self) -> dict:
        """The JSON fields: {terms, idf, max_n}."""
        return {"terms": list(self.terms), "idf": self.idf.tolist(), "max_n": words.MAX_N}

    @classmethod
    def from_record(cls, record) -> Self:
        """Rebuilds a vocabulary from `to_record` output.

        Raises:
          ValueError: the record does not fit together, or counts other n-grams.
        """
        terms, idf = tuple(record["terms"]), np.asarray(record["idf"], np.float64)
        if record.get("max_n", words.MAX_N) != words.MAX_N:
            raise errors.InvalidValueError(
                f"n-grams of up to {record['max_n']} words; this code counts up to {words.MAX_N}"
            )
        if idf.shape != (len(terms),) or len(set(terms)) != len(terms):
            raise errors.InvalidValueError(
                f"n-gram vocabulary of {len(terms)} terms has {idf.size} IDF values "
                "(or repeats a term)"
            )
        return cls(terms, idf)


def fit_vocabulary(texts) -> tuple[NgramVocabulary, sparse.csr_matrix]:
    """Fits the vocabulary and IDF on (training) `texts`.

    Returns:
      (NgramVocabulary, the texts' CSR features).

    Raises:
      ValueError: the texts hold no word.
    """
    vectorizer = _vectorizer()
    try:
        features = vectorizer.fit_transform(words.word_strings(texts))
    except ValueError as e:  # scikit-learn's "empty vocabulary" error
        raise errors.InvalidValueError(
            f"no word of two or more letters or digits in the {len(texts)} training texts ({e})"
        ) from None
    terms = tuple(vectorizer.get_feature_names_out().tolist())
    return NgramVocabulary(terms, vectorizer.idf_.astype(np.float64)), features
