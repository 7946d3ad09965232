"""Tests for tf_mlstm.data.readers on generated corpora, good and broken."""

import gzip
import json

import pytest

from tf_mlstm.data import readers

IMDB_RECORDS = [
    {"text": "Loved it.<br /><br />Would watch again.", "label": 1, "rating": 9, "id": "a"},
    {"text": "Terrible\tacting,  bad plot.", "label": 0, "rating": 2, "id": "b"},
    {"text": "Caf\u00e9 scene \U0001f600 was fun", "label": 1, "rating": 7, "id": "c"},
]


def _write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


def _read(paths, text_keys=("text",), **kwargs):
    log = readers.SkipLog()
    docs = list(readers.read_documents(paths, text_keys, skip_log=log, **kwargs))
    return docs, log


def test_jsonl_documents_are_normalized_with_labels_and_ratings(tmp_path):
    path = _write_jsonl(tmp_path / "imdb.jsonl", IMDB_RECORDS)
    docs, log = _read([path], label_key="label")
    assert [d.text for d in docs] == [
        "Loved it. Would watch again.",
        "Terrible acting, bad plot.",
        "Caf\u00e9 scene \U0001f600 was fun",
    ]
    assert [d.label for d in docs] == [1, 0, 1]
    assert [d.rating for d in docs] == [9.0, 2.0, 7.0]  # "rating" is read automatically.
    assert [(d.source, d.line) for d in docs] == [(path, 1), (path, 2), (path, 3)]
    assert log.total == 0


def test_gzip_jsonl_matches_plain(tmp_path):
    plain = _write_jsonl(tmp_path / "imdb.jsonl", IMDB_RECORDS)
    gz = tmp_path / "imdb.jsonl.gz"
    with open(plain, "rb") as f:
        gz.write_bytes(gzip.compress(f.read()))
    stats = readers.ReadStats()
    plain_docs, _ = _read([plain], label_key="label")
    gz_docs, _ = _read([str(gz)], label_key="label", read_stats=stats)
    assert [(d.text, d.label, d.line) for d in gz_docs] == [
        (d.text, d.label, d.line) for d in plain_docs
    ]
    assert stats.input_bytes == len(open(plain, "rb").read())  # Uncompressed bytes.
    assert stats.stored_bytes == gz.stat().st_size  # Bytes as stored, for the progress.
    plain_stats = readers.ReadStats()
    _read([plain], label_key="label", read_stats=plain_stats)
    assert plain_stats.stored_bytes == plain_stats.input_bytes == stats.input_bytes


def test_truncated_gzip_raises_naming_the_file(tmp_path):
    data = gzip.compress(("".join(json.dumps(r) + "\n" for r in IMDB_RECORDS * 50)).encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(readers.InputError, match=r"cut\.jsonl\.gz: truncated or corrupt gzip"):
        _read([str(path)])


def test_text_key_fallback_order_and_amazon_layout(tmp_path):
    path = _write_jsonl(
        tmp_path / "mixed.json",
        [
            {"reviewText": "amazon review", "summary": "s", "overall": 5.0, "asin": "X"},
            {"text": "imdb review", "label": 0},
            {"reviewText": "review wins", "text": "not this"},
            {"reviewText": None, "text": "null is skipped"},
        ],
    )
    docs, log = _read([path], text_keys=("reviewText", "text"))
    assert [d.text for d in docs] == [
        "amazon review",
        "imdb review",
        "review wins",
        "null is skipped",
    ]
    assert [d.rating for d in docs] == [5.0, None, None, None]
    assert [d.label for d in docs] == [None] * 4  # Labels only from label_key.
    assert log.total == 0


def test_text_keys_as_a_single_string(tmp_path):
    path = _write_jsonl(tmp_path / "a.jsonl", [{"text": "x"}])
    docs = list(readers.read_documents([path], "text"))
    assert [d.text for d in docs] == ["x"]


@pytest.mark.parametrize(
    "value, label",
    [
        (1, 1),
        (0, 0),
        (True, 1),
        (False, 0),
        ("1", 1),
        (" 0 ", 0),
        ("pos", 1),
        ("Positive", 1),
        ("neg", 0),
        ("NEGATIVE", 0),
        (3, 3),
        (2.0, 2),
    ],
)
def test_parse_label_accepts(value, label):
    assert readers.parse_label(value) == label


@pytest.mark.parametrize("value", ["maybe", -1, "-1", 0.5, None, [1], ""])
def test_parse_label_rejects(value):
    with pytest.raises(ValueError, match="not a label"):
        readers.parse_label(value)


def test_label_and_rating_problems_are_counted(tmp_path):
    path = _write_jsonl(
        tmp_path / "labels.jsonl",
        [
            {"text": "good", "label": "pos"},
            {"text": "no label"},
            {"text": "bad label", "label": "maybe"},
            {"text": "bad rating", "label": 1, "overall": "five"},
            {"text": "fine", "label": 0, "overall": "4.5"},
        ],
    )
    docs, log = _read([path], label_key="label")
    assert [(d.text, d.label, d.rating) for d in docs] == [("good", 1, None), ("fine", 0, 4.5)]
    assert log.counts == {"bad_label": 1, "bad_rating": 1, "missing_label": 1}
    assert log.examples["bad_label"][0].startswith(f"{path}:3: ")
    assert log.examples["missing_label"][0].startswith(f"{path}:2: ")


def test_explicit_rating_key(tmp_path):
    path = _write_jsonl(
        tmp_path / "r.jsonl", [{"text": "a", "stars": 3, "overall": 1.0}, {"text": "b"}]
    )
    docs, log = _read([path], rating_key="stars")
    assert [(d.text, d.rating) for d in docs] == [("a", 3.0)]
    assert log.counts == {"missing_rating": 1}


def test_bad_jsonl_lines_are_counted_with_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    lines = [
        json.dumps({"text": "first good"}).encode(),
        b'{"text": "truncated',
        json.dumps({"title": "no text key"}).encode(),
        b'{"text": "bad \xff\xfe bytes"}',
        json.dumps({"text": "  <br />  "}).encode(),
        b"",
        b"[1, 2]",
        json.dumps({"text": 42}).encode(),
        json.dumps({"text": "last good"}).encode(),
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    docs, log = _read([str(path)])
    assert [(d.text, d.line) for d in docs] == [("first good", 1), ("last good", 9)]
    assert log.counts == {
        "bad_text": 1,
        "empty_line": 1,
        "empty_text": 1,
        "invalid_utf8": 1,
        "malformed_json": 1,
        "missing_text_key": 1,
        "not_json_object": 1,
    }
    assert log.total == 7
    examples = log.examples
    assert examples["malformed_json"] == [
        f"{path}:2: malformed JSON: Unterminated string starting at (column 10)"
    ]
    assert examples["missing_text_key"][0].startswith(f"{path}:3: none of the text keys")
    assert examples["invalid_utf8"] == [f"{path}:4: invalid UTF-8 at byte 14"]
    assert examples["empty_text"][0].startswith(f"{path}:5: ")
    assert examples["empty_line"] == [f"{path}:6: blank line"]
    assert examples["not_json_object"] == [f"{path}:7: a JSON list, not an object"]
    assert examples["bad_text"][0].startswith(f"{path}:8: 'text' holds a int")


def test_csv_with_quoted_multiline_fields(tmp_path):
    path = tmp_path / "sst.csv"
    path.write_bytes(
        b"\xef\xbb\xbflabel,sentence\r\n"  # A byte-order mark, as Excel writes.
        b'1,"A stirring, funny film"\r\n'
        b'0,"line one\nline two\n""quoted"""\r\n'
        b"1,plain sentence\r\n"
        b"\r\n"
        b"0,too,many\r\n"
        b'1,"bad \xff byte"\r\n'
        b"0,\r\n"
        b"1,last\r\n"
    )
    docs, log = _read([str(path)], text_keys=("reviewText", "text", "sentence"), label_key="label")
    assert [(d.text, d.label, d.line) for d in docs] == [
        ("A stirring, funny film", 1, 2),
        ('line one line two "quoted"', 0, 3),
        ("plain sentence", 1, 6),
        ("last", 1, 11),
    ]
    assert log.counts == {
        "bad_csv_row": 1,
        "empty_line": 1,
        "invalid_utf8": 1,
        "missing_text_key": 1,
    }
    assert log.examples["bad_csv_row"] == [f"{path}:8: 3 fields, the header has 2"]
    assert log.examples["invalid_utf8"][0].startswith(f"{path}:9: ")
    assert log.examples["missing_text_key"][0].startswith(f"{path}:10: ")


def test_tsv_and_gzip_csv(tmp_path):
    tsv = tmp_path / "a.tsv"
    tsv.write_text("id\ttext\n1\tfirst, with comma\n2\tsecond\n", encoding="utf-8")
    csv_gz = tmp_path / "b.csv.gz"
    csv_gz.write_bytes(gzip.compress(b'text,label\n"third, quoted",1\n'))
    docs, log = _read([str(tsv), str(csv_gz)])
    assert [d.text for d in docs] == ["first, with comma", "second", "third, quoted"]
    assert log.total == 0


def test_csv_without_text_column_names_file_and_columns(tmp_path):
    path = tmp_path / "cols.csv"
    path.write_text("label,body\n1,hello\n", encoding="utf-8")
    with pytest.raises(
        readers.InputError, match=r"cols\.csv: no text column: .*\['label', 'body'\]"
    ):
        _read([str(path)], text_keys=("text", "sentence"))


def test_csv_without_a_label_column_names_file_and_columns(tmp_path):
    path = tmp_path / "cols.csv"
    path.write_text("label,sentence\n1,hello\n", encoding="utf-8")
    columns = r"in its header, which has the columns \['label', 'sentence'\]$"
    with pytest.raises(readers.InputError, match=r"cols\.csv: no column 'lable' " + columns):
        _read([str(path)], text_keys=("sentence",), label_key="lable")
    # The columns a caller keeps (the labels of several-label data) must be there too.
    with pytest.raises(readers.InputError, match=r"no column 'joy', 'fear' " + columns):
        list(readers.read_documents([str(path)], ("sentence",), keep_keys=("label", "joy", "fear")))
    # JSON lines have no header: a record without the key is skipped and counted.
    docs, log = _read([_write_jsonl(tmp_path / "j.jsonl", [{"text": "a"}])], label_key="x")
    assert docs == [] and log.counts == {"missing_label": 1}


def test_empty_csv_raises(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_bytes(b"")
    with pytest.raises(readers.InputError, match=r"empty\.csv: empty file"):
        _read([str(path)])


def test_plain_text_line_and_file_modes(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"first line\n\n  second\tline  \r\nbad \xff\nthird<br>line")
    docs, log = _read([str(path)], text_mode="line")
    assert [(d.text, d.line) for d in docs] == [
        ("first line", 1),
        ("second line", 3),
        ("third line", 5),
    ]
    assert log.counts == {"empty_line": 1, "invalid_utf8": 1}
    assert log.examples["invalid_utf8"] == [f"{path}:4: invalid UTF-8 at byte 4"]

    good = tmp_path / "doc.txt"
    good.write_text("A whole\nfile\n\nas one document.\n", encoding="utf-8")
    docs, log = _read([str(good), str(path)], text_mode="file")
    assert [(d.text, d.source, d.line) for d in docs] == [
        ("A whole file as one document.", str(good), 1)
    ]
    assert log.examples["invalid_utf8"] == [f"{path}:4: invalid UTF-8 at byte 33 of the file"]


def test_missing_file_raises_at_call(tmp_path):
    present = _write_jsonl(tmp_path / "a.jsonl", [{"text": "x"}])
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError, match=r"input file not found: .*nope\.jsonl"):
        readers.read_documents([present, missing], ("text",))


def test_bad_arguments_raise_at_call(tmp_path):
    path = _write_jsonl(tmp_path / "a.jsonl", [{"text": "x"}])
    with pytest.raises(ValueError, match="text_mode must be one of"):
        readers.read_documents([path], ("text",), text_mode="para")
    with pytest.raises(ValueError, match="text_keys must name"):
        readers.read_documents([path], ())


def test_expand_inputs_globs_order_and_dedup(tmp_path):
    for name in ("b.jsonl", "a.jsonl", "c.csv"):
        (tmp_path / name).write_text("", encoding="utf-8")
    spec = f"{tmp_path}/c.csv, {tmp_path}/*.jsonl,{tmp_path}/a.jsonl"
    assert readers.expand_inputs(spec) == [
        f"{tmp_path}/c.csv",
        f"{tmp_path}/a.jsonl",
        f"{tmp_path}/b.jsonl",
    ]


def test_expand_inputs_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"input pattern matches no files: .*\*\.gz"):
        readers.expand_inputs(f"{tmp_path}/*.gz")
    with pytest.raises(FileNotFoundError, match=r"input file not found: .*missing\.jsonl"):
        readers.expand_inputs(f"{tmp_path}/missing.jsonl")
    with pytest.raises(IsADirectoryError, match="input is a directory"):
        readers.expand_inputs(str(tmp_path))
    with pytest.raises(ValueError, match="no input files given"):
        readers.expand_inputs(" , ")


def test_skip_log_keeps_five_examples_and_counts_all():
    log = readers.SkipLog()
    for line in range(1, 8):
        log.add("malformed_json", "f.jsonl", line, "oops")
    log.add("empty_text", "g.txt", 3, "empty")
    assert log.to_dict() == {
        "total": 8,
        "by_reason": {"empty_text": 1, "malformed_json": 7},
        "examples": {
            "empty_text": ["g.txt:3: empty"],
            "malformed_json": [f"f.jsonl:{i}: oops" for i in range(1, 6)],
        },
    }
    log.log_summary()  # Must not raise; writes to absl logging.


def test_interleave_spreads_files_by_size(tmp_path):
    big = tmp_path / "big.txt"
    small = tmp_path / "small.txt"
    big.write_text("".join(f"big {i}\n" for i in range(90)))
    small.write_text("".join(f"small {i}\n" for i in range(10)))
    docs = list(readers.read_documents([str(big), str(small)], ["text"], interleave=True))
    assert len(docs) == 100
    order = [d.text.split()[0] for d in docs]
    # Small-file documents are spread out, not all at the end or the start.
    positions = [i for i, name in enumerate(order) if name == "small"]
    assert positions[0] < 15 and positions[-1] > 70
    assert [d.text for d in docs if d.text.startswith("big")] == [f"big {i}" for i in range(90)]
    sequential = list(readers.read_documents([str(big), str(small)], ["text"]))
    assert [d.text for d in sequential][:90] == [f"big {i}" for i in range(90)]


# === Bad input that must be skipped, counted and located, never crash or swallow ===


def test_labels_and_ratings_beyond_tfrecord_ranges_are_skipped(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_text(
        '{"text": "int64 max", "label": 9223372036854775807}\n'
        '{"text": "past int64", "label": 9223372036854775808}\n'
        '{"text": "huge float label", "label": 1e300}\n'
        '{"text": "past float32", "label": 1, "rating": 1e39}\n'
        '{"text": "past float64", "label": 1, "rating": 1' + "0" * 400 + "}\n"
        '{"text": "fine", "label": 1, "rating": -3.4e38}\n',
        encoding="utf-8",
    )
    docs, log = _read([str(path)], label_key="label")
    assert [(d.text, d.label) for d in docs] == [("int64 max", 2**63 - 1), ("fine", 1)]
    assert log.counts == {"bad_label": 2, "bad_rating": 2}
    assert log.examples["bad_label"][0].startswith(f"{path}:2: 'label': label 9223372036854775808")
    assert "beyond the int64 range" in log.examples["bad_label"][1]
    assert log.examples["bad_rating"][0].startswith(f"{path}:4: 'rating': rating 1e+39 is beyond")
    assert log.examples["bad_rating"][1].startswith(f"{path}:5: 'rating': not a finite number")
    assert len(log.examples["bad_rating"][1]) < 200  # The 400-digit value is not echoed whole.


def test_csv_unterminated_quote_skips_one_line_and_reads_on(tmp_path):
    path = tmp_path / "quotes.csv"
    path.write_text(
        "label,text\n"
        "1,first\n"
        '0,"stray quote, then more\n'  # Closed by the quote on line 5: wrong field count.
        "1,second\n"
        '0,"third, quoted"\n'
        '1,"multi\nline"\n'
        '0,"never closed\n'
        "1,fourth\n"
        "0,fifth\n",
        encoding="utf-8",
    )
    docs, log = _read([str(path)], label_key="label")
    assert [(d.text, d.line) for d in docs] == [
        ("first", 2),
        ("second", 4),
        ("third, quoted", 5),
        ("multi line", 6),
        ("fourth", 9),
        ("fifth", 10),
    ]
    assert log.counts == {"bad_csv_row": 1, "unterminated_quote": 1}
    assert log.examples["bad_csv_row"] == [
        f"{path}:3: 3 fields, the header has 2 (over 3 lines; the lines after its first were "
        "read on)"
    ]
    assert log.examples["unterminated_quote"][0].startswith(
        f"{path}:8: quoted field still open at the end of the file"
    )


def test_csv_record_limit_bounds_an_open_quote(tmp_path):
    path = tmp_path / "long.csv"
    rows = "".join(f"1,row {i}\n" for i in range(200))
    path.write_text("label,text\n" + '0,"open\n' + rows, encoding="utf-8")
    docs, log = _read([str(path)], label_key="label", max_document_bytes=100)
    assert [d.text for d in docs] == [f"row {i}" for i in range(200)]
    assert log.counts == {"record_too_long": 1}
    assert log.examples["record_too_long"][0].startswith(
        f"{path}:2: record longer than max_document_bytes=100 over "
    )


@pytest.mark.parametrize("name", ["big.jsonl", "big.txt", "big.csv"])
def test_a_20_mb_line_is_skipped_in_bounded_memory(tmp_path, name):
    import tracemalloc

    path = tmp_path / name
    header = b"text\n" if name.endswith(".csv") else b""
    record = (lambda text: json.dumps({"text": text}).encode()) if "json" in name else str.encode
    with open(path, "wb") as f:
        f.write(header + record("before") + b"\n")
        f.write(record("x" * (20 << 20)) + b"\n")
        f.write(record("after") + b"\n" + record("y" * 1500))  # No final newline, too long.
    tracemalloc.start()
    try:
        docs, log = _read([str(path)], max_document_bytes=1000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    first = 2 if header else 1
    assert [(d.text, d.line) for d in docs] == [("before", first), ("after", first + 2)]
    assert log.counts == {"record_too_long": 2}
    example = log.examples["record_too_long"][0]
    assert example.startswith(f"{path}:{first + 1}: ") and "longer than" in example
    assert log.examples["record_too_long"][1].startswith(f"{path}:{first + 3}: ")
    assert peak < 6 << 20, f"peak {peak / 2**20:.1f} MiB for a 20 MiB line"


def test_file_mode_skips_a_file_past_the_limit(tmp_path):
    small, big = tmp_path / "small.txt", tmp_path / "big.txt"
    small.write_text("short\nfile\n", encoding="utf-8")
    big.write_text("word " * 100 + "\n" + "more\n" * 50, encoding="utf-8")
    docs, log = _read([str(big), str(small)], text_mode="file", max_document_bytes=200)
    assert [d.text for d in docs] == ["short file"]
    assert log.counts == {"record_too_long": 1}
    assert log.examples["record_too_long"][0].startswith(f"{big}:1: file (at least) of ")


def test_max_document_bytes_must_be_positive(tmp_path):
    path = _write_jsonl(tmp_path / "a.jsonl", IMDB_RECORDS)
    with pytest.raises(ValueError, match="max_document_bytes must be >= 1"):
        readers.read_documents([path], ["text"], max_document_bytes=0)


def test_a_csv_header_that_names_a_column_twice_is_refused_naming_file_and_column(tmp_path):
    path = tmp_path / "twice.csv"
    path.write_text("text,label,text\nkept,1,dropped\n", encoding="utf-8")
    with pytest.raises(
        readers.InputError,
        match=r"twice\.csv:1: the header names the column 'text' twice \(columns 1 and 3\)",
    ):
        _read([str(path)])
    # Empty names (trailing commas) select nothing and stay fine.
    path.write_text("text,label,,\nkept,1,,\n", encoding="utf-8")
    assert [doc.text for doc in _read([str(path)])[0]] == ["kept"]


@pytest.mark.parametrize(
    ("content", "what"),
    [
        ('[\n  {"text": "one"},\n  {"text": "two"}\n]\n', "a JSON array"),
        ('[{"text": "one"}, {"text": "two"}]\n', "a JSON array"),
        ('\n{\n  "text": "one",\n  "label": 1\n}\n', "one JSON object over many lines"),
    ],
)
def test_a_whole_file_json_document_given_as_json_lines_is_one_line_saying_so(
    tmp_path, content, what
):
    path = tmp_path / "reviews.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(
        readers.InputError,
        match=rf"reviews\.json:\d: the file is {what}, not JSON lines \(one object per line\)",
    ):
        _read([str(path)])
