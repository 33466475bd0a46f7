"""`lfm-chat -p --json-schema FILE|JSON`: a real `lfm-chat` process prints JSON that validates against
the schema, and refuses a bad schema in one sentence with exit code 2 before loading anything."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from tests.app.test_oneshot import lfm_chat

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 9},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}


def test_the_reply_is_json_that_matches_the_schema_file(tiny_ckpt: Path, tmp_path: Path) -> None:
    schema_file = tmp_path / "trip.json"
    schema_file.write_text(json.dumps(SCHEMA))
    argv = [
        "--model",
        str(tiny_ckpt),
        "-p",
        "Plan a trip",
        "--json-schema",
        str(schema_file),
        "--max-tokens",
        "200",
    ]
    done = lfm_chat(argv, tmp_path)
    assert done.returncode == 0, done.stderr
    jsonschema.validate(json.loads(done.stdout), SCHEMA)


def test_a_bad_schema_is_one_sentence_and_exit_code_2(tiny_ckpt: Path, tmp_path: Path) -> None:
    for bad in ['{"type": "wat"}', '{"type": "object"', str(tmp_path / "missing.json")]:
        done = lfm_chat(["--model", str(tiny_ckpt), "-p", "Hi", "--json-schema", bad], tmp_path)
        assert done.returncode == 2
        assert done.stdout == b""
        [line] = done.stderr.decode().splitlines()
        assert line.startswith("lfm-chat: error: --json-schema")
