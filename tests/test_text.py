"""Tests for tf_mlstm.data.text: normalization goldens, the document-start byte, graph parity."""

import random

import pytest
import tensorflow as tf

from tf_mlstm.data import text

GOLDEN = [
    ("Great movie!<br /><br />Loved it.", "Great movie! Loved it."),
    ("A<BR>b<br/>c<Br  />d<p>e</P>f", "A b c d e f"),
    ("Tom &amp; Jerry &lt;3 &quot;ok&quot; it&#39;s", 'Tom & Jerry <3 "ok" it\'s'),
    ("&amp;lt;", "&lt;"),  # Entities decode once.
    ("&lt;br /&gt;x", "x"),  # An escaped tag is still a line break.
    ("cafe\u0301", "caf\u00e9"),  # Decomposed accent composes (NFKC).
    ("\uff28\uff45\uff4c\uff4c\uff4f \ufb01ne \u00bd", "Hello fine 1\u20442"),
    ("a\tb\n\nc\r\nd\u000be\u000cf", "a b c d e f"),
    ("x\u00a0\u00a0y\u3000z\u2003w", "x y z w"),
    ("line\u2028sep\u2029para\u0085nel", "line sep para nel"),
    ("zero\u200bwidth\u00adsoft\ufeffbom", "zerowidthsoftbom"),
    ("bell\x07 null\x00 del\x7f", "bell null del"),
    ("  padded   out  ", "padded out"),
    ("I \u2764\ufe0f it \U0001f600", "I \u2764\ufe0f it \U0001f600"),
    ("lone \ud800 surrogate", "lone \ufffd surrogate"),
    ("", ""),
    ("   \n\t ", ""),
    ("<br /><br />&nbsp;", ""),
    ("\x00\u200b", ""),
]


@pytest.mark.parametrize("raw, expected", GOLDEN)
def test_normalize_text_golden(raw, expected):
    assert text.normalize_text(raw) == expected


def test_normalize_text_never_has_newlines_or_edge_spaces():
    rng = random.Random(0)
    alphabet = "ab \n\r\t\u00a0\u2028\u0085\x00\u200b<br/>&;\u00e9\u0301\uff21"
    for _ in range(300):
        raw = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        out = text.normalize_text(raw)
        assert "\n" not in out and "  " not in out
        assert out == out.strip(" ")
        out.encode("utf-8")  # Always encodable.


def test_normalize_text_rejects_bytes():
    with pytest.raises(TypeError, match="expects str, got bytes"):
        text.normalize_text(b"abc")


def test_doc_start_is_a_byte_normalized_text_never_holds():
    assert text.DOC_START == 10 and text.DOC_START_BYTE == b"\n"
    assert text.DOC_START_BYTE not in text.normalize_text("a\nb\n\nc").encode("utf-8")


# Cases for the graph version: only the entities it knows (named common ones).
PARITY = [
    "Great movie!<br /><br />Loved it.",
    "A<BR>b<br/>c<Br  />d<p>e</P>f",
    "Tom &amp; Jerry &lt;3 &gt; &quot;ok&quot; it&#39;s &apos;x&apos;",
    "&amp;lt; &amp;amp;",
    "&lt;br /&gt;escaped break",
    "cafe\u0301 nai\u0308ve A\u030a",
    "\uff28\uff45\uff4c\uff4c\uff4f \ufb01ne \u00bd \u2460",
    "a\tb\n\nc\r\nd\u000be\u000cf\x1cg",
    "x&nbsp;&nbsp;y\u00a0z\u3000w\u2003v",
    "line\u2028sep\u2029para\u0085nel",
    "zero\u200bwidth\u00adsoft\ufeffbom\u202eltr",
    "bell\x07 null\x00 del\x7f c1\x9b",
    "  padded   out  ",
    "I \u2764\ufe0f it \U0001f600 \U0001f44d\U0001f3fd",
    "\u65e5\u672c\u8a9e\u306e\u30ec\u30d3\u30e5\u30fc \uff76\uff80\uff76\uff85",
    "\u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd",
    "",
    "   \n\t ",
    "<br /><br />",
    "5 stars!!! 10/10 -- would buy again :-)",
    "Mixed\r\n<p>paragraphs</p>\r\n\r\nand &quot;quotes&quot;",
]


def test_normalize_text_tf_agrees_with_python():
    got = text.normalize_text_tf(tf.constant(PARITY)).numpy().tolist()
    expected = [text.normalize_text(s).encode("utf-8") for s in PARITY]
    assert got == expected


def test_normalize_text_tf_keeps_shape_and_replaces_invalid_utf8():
    raw = tf.constant([[b"ok\xffbad", b"a<br>b"], [b"\xc3", b"fine"]])
    out = text.normalize_text_tf(raw)
    assert out.shape == (2, 2)
    assert out.numpy().tolist() == [
        ["ok\ufffdbad".encode(), b"a b"],
        ["\ufffd".encode(), b"fine"],
    ]
    assert text.normalize_text_tf(tf.constant("x\ny")).numpy() == b"x y"


def test_normalize_text_tf_in_tf_function():
    fn = tf.function(text.normalize_text_tf, input_signature=[tf.TensorSpec([None], tf.string)])
    assert fn(tf.constant(["a&amp;b<br />c"])).numpy().tolist() == [b"a&b c"]


def test_normalize_text_tf_rejects_non_strings():
    with pytest.raises(TypeError, match="expects a tf.string tensor"):
        text.normalize_text_tf(tf.constant([1, 2]))
