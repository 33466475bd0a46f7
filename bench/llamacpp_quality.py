"""The quality workload beside llama.cpp's quantizations, over the same token positions.

    python -m bench.llamacpp_quality --llama-bin DIR --gguf-dir DIR [--model CHECKPOINT] [--markdown]

llama.cpp measures a quantization with ``llama-perplexity --kl-divergence``: first its bf16 model
writes the log-probabilities of every scored position to a base file, then each quantized GGUF
is compared with them. It tokenizes a text file, so this script writes one (random plain tokens
of the checkpoint's tokenizer, decoded), lets llama.cpp's bf16 run make the base file, reads
the token ids back from that file, and runs lfm-chat's quality workload (bench/quality.py, the
same layout: chunks of 512 with BOS first, their second half scored) on exactly those tokens.
Each engine is compared with its own bf16 model; a last row compares the two bf16 models with
each other (KL of lfm-chat's bf16 from llama.cpp's, read from the base file), which shows the
GGUFs hold the checkpoint's weights.

GGUFs are found in --gguf-dir by suffix: *-bf16.gguf (the base), *-q8_0, *-q4_0, *-q4_k_m. Without
llama.cpp (no --llama-bin, no llama-perplexity on PATH) the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bench import quality
from bench.checkpoint import DEFAULT_SHAPE, random_checkpoint
from bench.progress import Progress
from bench.report import render_table
from model.quant.apply import QUANTIZED_LINEARS
from model.text.tokenizer import Tokenizer

QUANTS = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q4_k_m": "Q4_K_M"}
_FIGURES = {
    "mean KL": r"Mean\s+KLD:\s+(\S+)",
    "p99 KL": r"99\.0%\s+KLD:\s+(\S+)",
    "top-1 agreement": r"Same top p:\s+(\S+)",  # in percent
}


@dataclass(slots=True)
class KlBase:
    """A ``--kl-divergence-base`` file: the tokens llama.cpp scored, and its bf16 log-probabilities."""

    context: int
    chunks: list[list[int]]  # as tokenized; llama-perplexity puts BOS in place of each first token
    data: bytes
    offset: int  # where the log-probabilities start
    vocab: int

    @classmethod
    def read(cls, path: Path) -> KlBase:
        data = path.read_bytes()
        if data[:8] != b"_logits_":
            raise ValueError(f"{path} is not a llama-perplexity log-probabilities file")
        context, vocab, count = np.frombuffer(data, dtype=np.int32, count=3, offset=8).tolist()
        tokens = np.frombuffer(data, dtype=np.int32, count=context * count, offset=20)
        chunks = [tokens[i * context : (i + 1) * context].tolist() for i in range(count)]
        return cls(context, chunks, data, 20 + 4 * context * count, vocab)

    def log_probs(self, chunk: int) -> torch.Tensor:
        """Chunk ``chunk``'s scored log-probabilities [positions, vocab] as llama.cpp stores them: 16-bit
        steps above the row's minimum, which sits at most 16 nats below its maximum (lower values
        read as the minimum, as llama.cpp reads them)."""
        row = 2 * ((self.vocab + 1) // 2) + 4  # uint16 per position: scale and minimum (2 floats), values
        positions = self.context - 1 - self.context // 2
        start = self.offset + chunk * positions * row * 2
        raw = np.frombuffer(self.data, dtype=np.uint16, count=positions * row, offset=start).reshape(
            positions, -1
        )
        scale_and_min = raw[:, :4].copy().view(np.float32)
        steps = torch.from_numpy(raw[:, 4 : 4 + self.vocab].astype(np.float64))
        scale, minimum = (torch.from_numpy(scale_and_min[:, i].astype(np.float64))[:, None] for i in (0, 1))
        return minimum + scale * steps


def llama_figures(output: str) -> dict[str, float]:
    """Mean and 99th-percentile KL and same-top share from llama-perplexity's summary."""
    found = {name: re.search(pattern, output) for name, pattern in _FIGURES.items()}
    missing = [name for name, match in found.items() if match is None]
    if missing:
        raise RuntimeError(f"llama-perplexity printed no {missing[0]}:\n{output[-2000:]}")
    figures = {name: float(match.group(1)) for name, match in found.items()}
    figures["top-1 agreement"] /= 100
    return figures


def cross_check(base: KlBase, ours: list[torch.Tensor]) -> dict[str, float]:
    """KL(llama.cpp bf16 || lfm-chat bf16) over the same positions, as llama.cpp sums it (terms
    above -16 nats), and top-1 agreement: how far apart the two engines' bf16 models are."""
    kl, same = [], []
    for i, log_probs in enumerate(ours):
        reference = base.log_probs(i)
        kept = reference > -16
        terms = reference.exp() * (reference - log_probs.double())
        kl.append(torch.where(kept, terms, 0).sum(-1))
        same.append(reference.argmax(-1) == log_probs.argmax(-1))
    divergence = quality.Divergence(torch.cat(kl), torch.cat(same))
    return divergence.figures()


class LlamaPerplexity:
    def __init__(self, binary: Path, threads: int, context: int) -> None:
        self.binary, self.threads, self.context = binary, threads, context

    def run(self, gguf: Path, *args: str) -> str:
        argv = [str(self.binary), "-m", str(gguf), "-t", str(self.threads), "-c", str(self.context)]
        argv += ["-b", str(self.context), *args]
        done = subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
        return done.stdout + done.stderr


def write_text(tokenizer: Tokenizer, tokens: int, seed: int, path: Path) -> None:
    """Random plain tokens decoded: llama.cpp tokenizes it back (to about as many tokens)."""
    plain = [i for i in range(tokenizer.vocab_size) if not tokenizer.is_special(i)]
    ids = quality.random_stream(plain, tokens, seed)
    path.write_text(tokenizer.decode(ids), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    binary = _llama_perplexity(args.llama_bin)
    if binary is None:
        print(
            "llama.cpp's llama-perplexity not found (--llama-bin DIR, or on PATH): skipped", file=sys.stderr
        )
        return 0
    ggufs = {
        suffix: next(iter(sorted(args.gguf_dir.glob(f"*-{suffix}.gguf"))), None)
        for suffix in ("bf16", *QUANTS)
    }
    if ggufs["bf16"] is None:
        print(f"no *-bf16.gguf in {args.gguf_dir}: skipped", file=sys.stderr)
        return 0
    torch.set_num_threads(args.threads)
    checkpoint = args.model or random_checkpoint(DEFAULT_SHAPE)
    context, count = quality.SIZES[args.quick]
    schemes = list(QUANTIZED_LINEARS)
    quants = [suffix for suffix in QUANTS if ggufs[suffix] is not None]
    progress = Progress(2 + len(schemes) + len(quants))  # base, our bf16, each scheme, each GGUF
    llama = LlamaPerplexity(binary, args.threads, context)
    with tempfile.TemporaryDirectory(prefix="lfm-kld-") as scratch:
        text, base_file = Path(scratch) / "text.txt", Path(scratch) / "base.kld"
        tokenizer = Tokenizer.from_pretrained(checkpoint)
        write_text(tokenizer, int(1.5 * context * count), args.seed, text)
        with progress.run(f"llama.cpp    bf16 base ({ggufs['bf16'].name})"):
            llama.run(
                ggufs["bf16"], "-f", str(text), "--chunks", str(count), "--kl-divergence-base", str(base_file)
            )
        base = KlBase.read(base_file)
        if len(base.chunks) < count:
            raise RuntimeError(f"llama.cpp made {len(base.chunks)} chunks of the text, not {count}")
        stream = [token for chunk in base.chunks for token in chunk]
        chunks = quality.chunks_of(stream, context, count, tokenizer.bos_token_id)
        with progress.run(f"lfm-chat     bf16 ({args.dtype}) against llama.cpp's"):
            reference = list(quality.log_probs_over(checkpoint, args.dtype, "none", chunks))
            check = cross_check(base, reference)
        ours = quality.compare_schemes(checkpoint, args.dtype, schemes, chunks, reference, progress)
        del reference
        theirs = {}
        for suffix in quants:
            with progress.run(f"llama.cpp    {QUANTS[suffix]}"):
                output = llama.run(ggufs[suffix], "--kl-divergence-base", str(base_file), "--kl-divergence")
                theirs[QUANTS[suffix]] = llama_figures(output)
    print(_report(ours, theirs, check, args))
    return 0


def _report(ours: quality.QualityResult, theirs: dict, check: dict, args: argparse.Namespace) -> str:
    headers = ["weights", "engine", "mean KL (nats) ↓", "p99 KL (nats) ↓", "top-1 agreement ↑"]

    def row(name: str, engine: str, f: dict[str, float]) -> list[str]:
        top = f"{100 * f['top-1 agreement']:.2f}%"
        return [name, engine, f"{f['mean KL']:.5f}", f"{f['p99 KL']:.5f}", top]

    rows = [row(s, "lfm-chat", f) for s, f in ours.schemes.items()]
    rows += [row(name, "llama.cpp", f) for name, f in theirs.items()]
    rows.append(row("bf16 vs bf16", "lfm-chat vs llama.cpp", check))
    return "\n".join(
        [
            f"quality over the same {ours.positions} teacher-forced positions, each engine against its bf16",
            "",
            render_table(headers, rows, args.markdown),
            "",
            quality.peakedness_line(ours.peakedness),
        ]
    )


def _llama_perplexity(directory: Path | None) -> Path | None:
    if directory is not None:
        found = directory / "llama-perplexity"
        return found if found.is_file() and os.access(found, os.X_OK) else None
    on_path = shutil.which("llama-perplexity")
    return Path(on_path) if on_path else None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.llamacpp_quality", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--llama-bin", type=Path, help="directory of llama.cpp's built tools (default: PATH)")
    parser.add_argument("--gguf-dir", type=Path, required=True, help="holds *-bf16.gguf, *-q8_0.gguf, ...")
    parser.add_argument(
        "--model", type=Path, help="the checkpoint the GGUFs were made from (default: bench's 350M)"
    )
    parser.add_argument(
        "--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="lfm-chat's reference"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="4 chunks of 64: a smoke run")
    parser.add_argument("--markdown", action="store_true")
    return parser


if __name__ == "__main__":
    sys.exit(main())
