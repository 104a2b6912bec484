"""run.json as one typed struct: what is written reads back typed, a wrong field is named, nothing half-written."""

import json

import pytest

from engine.protocol.errors import InputError
from engine.protocol.paths import RunPaths
from engine.protocol.run_meta import RunMeta, RunMetaError, read_run_meta, require_model_path, update_run_meta


def test_fields_written_in_turn_read_back_typed_and_the_file_stays_plain_json(tmp_path):
    paths = RunPaths(tmp_path / "run")
    paths.root.mkdir()
    assert paths.read_meta() == RunMeta()  # before `up` wrote one
    paths.update_meta(model_path="/models/m", started="2026-12-05T03:00:00", argv=["up", "--minutes", "5"])
    paths.update_meta(bus={"workers": {"frames": 3}}, time_share={"rounds": 2, "unanswered": 0, "slowest_sleep_s": 0.5})
    meta = paths.read_meta()
    assert meta.model_path == "/models/m" and meta.argv == ["up", "--minutes", "5"] and meta.bus == {"workers": {"frames": 3}}
    assert meta.time_share["rounds"] == 2 and meta.curriculum_started is None
    raw = json.loads(paths.meta.read_text())  # other tools (and the e2e tests) read it as JSON
    assert raw["model_path"] == "/models/m" and raw["time_share"]["slowest_sleep_s"] == 0.5
    assert paths.read_model_path() == "/models/m" and not paths.meta.with_suffix(".tmp").exists()


def test_an_unknown_field_or_a_wrong_type_is_refused_on_write_and_the_file_is_left_as_it_was(tmp_path):
    path = tmp_path / "run.json"
    update_run_meta(path, model_path="/m")
    before = path.read_text()
    with pytest.raises(RunMetaError, match="no field model_pth"):
        update_run_meta(path, model_pth="/m")
    with pytest.raises(RunMetaError, match=r"\$\.curriculum_started"):
        update_run_meta(path, curriculum_started="soon")
    assert path.read_text() == before


@pytest.mark.parametrize("text, named", [
    ('{"model_path": 3}', r"\$\.model_path"),
    ('{"argv": "up"}', r"\$\.argv"),
    ('{"model_path": "/m"', "not a run record"),
])
def test_a_run_json_that_is_not_a_record_is_an_input_error_naming_the_file_and_field(tmp_path, text, named):
    path = tmp_path / "run.json"
    path.write_text(text)
    with pytest.raises(RunMetaError, match=named) as caught:
        read_run_meta(path)
    assert isinstance(caught.value, InputError) and str(path) in str(caught.value)


def test_keys_of_a_newer_engine_are_ignored_and_a_missing_model_path_is_named(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"model_path": "/m", "from_the_future": [1, 2]}))
    assert read_run_meta(path).model_path == "/m"
    path.write_text(json.dumps({"argv": ["up"]}))
    with pytest.raises(RunMetaError, match="base model is not recorded"):
        require_model_path(path)
