"""bench.serve_compare's client: its stream parsing and round arithmetic, and a real `lfm-chat serve`
process on the tiny checkpoint started, paused and measured the way the comparison does it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import serve_compare
from bench.serve_compare import BadStream, Round, StreamTally
from model.text.tokenizer import Tokenizer


def tally(*lines: str) -> StreamTally:
    counted = StreamTally()
    for line in lines:
        counted.feed(line)
    return counted


def chunk(text: str) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, "text": text}]})


def test_the_usage_chunk_counts_the_tokens_and_text_chunks_count_without_it():
    usage = "data: " + json.dumps({"choices": [], "usage": {"completion_tokens": 5}})
    assert tally(chunk("a"), "", chunk("b"), usage, "data: [DONE]").tokens == 5
    assert tally(": keep-alive", chunk("a"), chunk(""), chunk("b"), "data: [DONE]").tokens == 2


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        ([chunk("a")], "ended before its data"),
        (["data: {not json"], "not JSON"),
        (["data: [1, 2]"], "not a JSON object"),
        (['data: {"error": {"message": "boom"}}'], "error mid-stream"),
        (["data: " + "x" * (serve_compare.MAX_LINE_CHARS + 1)], "characters"),
    ],
)
def test_a_broken_stream_fails_with_a_sentence_saying_how(lines: list[str], said: str):
    with pytest.raises(BadStream, match=said):
        tally(*lines).tokens  # noqa: B018  (reading the count is what checks the stream's end)


def test_prompts_differ_from_the_first_word_between_clients_rounds_and_concurrencies():
    """A prompt repeated at the next concurrency is a prefix-cache hit for a server that kept it."""
    prompts = [
        serve_compare.prompt(client, number, concurrency)
        for concurrency in (8, 16)
        for client in range(concurrency)
        for number in range(2)
    ]
    assert all(len(p.split()) == serve_compare.PROMPT_WORDS for p in prompts)
    assert len({p.split()[0] for p in prompts}) == len(prompts)
    assert serve_compare.prompt(1, 1, 8) == serve_compare.prompt(1, 1, 8)


def test_words_sets_the_prompts_length_and_they_are_counted_as_the_servers_encode_them(tiny_ckpt: Path):
    args = serve_compare.parse_args(["--words", "30", "--clients", "1,2"])
    assert (args.words, args.clients) == (30, [1, 2])
    assert serve_compare.parse_args([]).words == serve_compare.PROMPT_WORDS
    with pytest.raises(SystemExit):
        serve_compare.parse_args(["--words", "0"])
    served = Tokenizer.from_pretrained(tiny_ckpt)
    texts = [
        serve_compare.prompt(i, number, count, 30)
        for count in (1, 2)
        for number in range(2)
        for i in range(count)
    ]
    assert all(len(text.split()) == 30 for text in texts)
    counts = serve_compare.prompt_tokens(tiny_ckpt, [1, 2], 2, 30)
    assert counts == [len(served.encode(text, add_special_tokens=True)) for text in texts]


def test_the_summary_gives_medians_each_round_the_ratio_and_why_vllm_was_skipped():
    bandwidth = serve_compare.Bandwidth(20.0, 2, 1)
    results = [
        Round("a", 8, 800, 8.0),
        Round("b", 8, 800, 10.0),
        Round("a", 8, 800, 4.0),
        Round("b", 8, 800, 10.0),
    ]
    headers, rows = serve_compare.summary(results, ["a", "b"], {8: bandwidth}, None)
    assert headers == ["clients", "a (tok/s)", "b (tok/s)", "a / b", "read bandwidth"]
    assert rows == [["8", "150.0 (100.0, 200.0)", "80.0 (80.0, 80.0)", "1.88x", "20.0 GB/s"]]
    _, rows = serve_compare.summary(results[:1], ["a"], {8: bandwidth}, "no vLLM here")
    assert rows[-1] == ["vLLM skipped", "no vLLM here"]


def test_vllm_gets_a_checkpoint_with_conv_dim_and_a_missing_venv_is_one_sentence(
    tiny_ckpt: Path, tmp_path: Path
):
    linked = serve_compare.vllm_checkpoint(tiny_ckpt)
    config = json.loads((linked / "config.json").read_text())
    assert config["conv_dim"] == config["block_dim"] == config["hidden_size"]
    assert sorted(p.name for p in linked.iterdir()) == sorted(p.name for p in tiny_ckpt.iterdir())
    said = serve_compare.vllm_unavailable(tmp_path / "no-venv" / "python")
    assert said and "docs/SCALE_OUT.md" in said
    log = tmp_path / "vllm.log"
    log.write_text(
        "(APIServer pid=1) WARNING 11-29 02:30:31 [utils.py:2] can cause `OSError: [Errno 24]`\n"
        "(VllmWorker-0 pid=2) ERROR 11-29 02:31:48 [executor.py:953] ValueError: Available memory on node 0\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n\n"
    )
    assert serve_compare.failure(log) == "ValueError: Available memory on node 0"
    log.write_text("lfm-chat serve: importing PyTorch\nKilled\n")
    assert serve_compare.failure(log) == "Killed"


@pytest.mark.subprocess  # the server is started by bench.served, not by code of tests/
def test_rounds_against_a_paused_and_resumed_lfm_chat_serve_count_every_streamed_token(
    tiny_ckpt: Path, tmp_path: Path
):
    spec = serve_compare.lfm_chat_spec(tiny_ckpt, max_num_seqs=4, quantize="none")
    with serve_compare.started(spec, tmp_path / "serve.log") as (url, process):
        serve_compare.pause(process)
        results, bandwidths = serve_compare.compare({spec.name: (url, process)}, [1, 3], 2, 5, 2)
    assert [(r.clients, r.tokens) for r in results] == [(1, 5), (1, 5), (3, 15), (3, 15)]
    assert all(r.server == "lfm-chat serve" and r.tok_per_s > 0 for r in results)
    assert list(bandwidths) == [1, 3]
