"""Words and word n-grams of normalized text, in TensorFlow ops: the TF-IDF features.

Scikit-learn's fit and the exported `classify` signature both tokenize with these ops.
"""

import tensorflow as tf

from tf_mlstm.data.fields import NGRAM_KIND  # noqa: F401 (the kind's name, without TensorFlow)

MAX_N = 2
"""Unigrams and bigrams."""
_SEPARATORS_RE2 = r"[^\p{L}\p{M}\p{N}_]+"
_TOKEN_CHUNK = 8192


def tokenize(texts) -> tf.RaggedTensor:
    """The kept words of each text: [N] tf.string -> ragged [N, (words)] tf.string."""
    lowered = tf.strings.lower(tf.convert_to_tensor(texts, tf.string), encoding="utf-8")
    words = tf.strings.split(tf.strings.regex_replace(lowered, _SEPARATORS_RE2, " "))
    keep = tf.strings.length(words, unit="UTF8_CHAR") >= 2
    return tf.ragged.boolean_mask(words, keep)


def ngrams(texts, max_n=MAX_N) -> tf.RaggedTensor:
    """Each text's words and n-grams of up to `max_n` words: ragged [N, (terms)]."""
    words = tokenize(texts)
    return tf.strings.ngrams(words, list(range(1, max_n + 1)), separator=" ")


def word_strings(texts) -> list[str]:
    """Each text's kept words (`tokenize`) joined by spaces, for scikit-learn's `str.split`.

    Args:
      texts: a sequence of str.

    Returns:
      A list of str, one per text.
    """
    texts = list(texts)
    out = []
    for start in range(0, len(texts), _TOKEN_CHUNK):
        chunk = tf.constant(texts[start : start + _TOKEN_CHUNK], tf.string)
        joined = tf.strings.reduce_join(tokenize(chunk), axis=1, separator=" ")
        out.extend(value.decode("utf-8") for value in joined.numpy())
    return out


def vocabulary_table(terms) -> tf.lookup.StaticHashTable:
    """A lookup table term -> column (its position in `terms`); -1 for other terms."""
    terms = tf.constant([term.encode("utf-8") for term in terms], tf.string)
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(terms, tf.range(tf.size(terms, tf.int64))),
        default_value=-1,
    )


def tfidf(texts, table, idf, max_n=MAX_N) -> tf.Tensor:
    """TF-IDF of the n-grams of `texts` over a fixed vocabulary: [N, V] float32.

    Args:
      texts: [N] tf.string, normalized text.
      table: `vocabulary_table` of the V terms.
      idf: [V] float32 inverse document frequencies, in column order.
      max_n: the longest n-gram counted.

    Returns:
      (1 + log count) x IDF, each row scaled to unit L2 norm (0 with no known term).
    """
    terms = ngrams(texts, max_n)
    columns = table.lookup(terms.flat_values)
    rows = terms.value_rowids()
    known = columns >= 0
    columns, rows = tf.boolean_mask(columns, known), tf.boolean_mask(rows, known)
    vocab = tf.shape(idf, out_type=tf.int64)[0]
    count = tf.shape(terms.row_splits, out_type=tf.int64)[0] - 1
    cells = tf.math.unsorted_segment_sum(
        tf.ones_like(columns, tf.float32), rows * vocab + columns, count * vocab
    )
    counts = tf.reshape(cells, tf.stack([count, vocab]))
    weights = tf.where(counts > 0, 1.0 + tf.math.log(tf.maximum(counts, 1.0)), 0.0) * idf
    return tf.math.l2_normalize(weights, axis=1, epsilon=1e-24)
