"""The one metrics.jsonl reader (engine/protocol/metrics_file.py) skips what a crash or a stray writer leaves."""

from engine.protocol.metrics_file import read_rows


def test_rows_that_do_not_decode_to_an_object_are_skipped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 0}\n\n5\n["a list"]\n\xff\xfe not utf-8\n{"step": 1}\n{"step": 2, "los')
    assert read_rows(path) == [{"step": 0}, {"step": 1}]


def test_no_file_is_no_rows(tmp_path):
    assert read_rows(tmp_path / "metrics.jsonl") == []
    (tmp_path / "folder").mkdir()
    assert read_rows(tmp_path / "folder") == []
