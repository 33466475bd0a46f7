"""A seeded request samples the same tokens whatever else shares its batches."""

from __future__ import annotations

from engine import SamplingParams

SEEDED = [
    SamplingParams(temperature=0.9, seed=11, max_tokens=24, ignore_eos=True),
    SamplingParams(temperature=1.3, top_k=20, top_p=0.8, seed=12, max_tokens=24, ignore_eos=True),
    SamplingParams(
        temperature=0.7,
        min_p=0.1,
        repetition_penalty=1.3,
        frequency_penalty=0.5,
        seed=13,
        max_tokens=24,
        ignore_eos=True,
    ),
]


def test_seeded_requests_are_reproducible_regardless_of_batch_composition(tiny_ckpt, make_engine, prompts):
    targets = prompts([30, 7, 120], seed=12)
    alone = [
        make_engine(tiny_ckpt).generate([prompt], params)[0].token_ids
        for prompt, params in zip(targets, SEEDED, strict=True)
    ]

    crowd = prompts([200, 3, 64, 90, 15], seed=13)
    noise = SamplingParams(temperature=1.0, max_tokens=30, ignore_eos=True)
    engine = make_engine(tiny_ckpt, max_num_seqs=4, max_num_batched_tokens=40, block_size=8)
    outs = engine.generate(crowd[:2] + targets + crowd[2:], [noise] * 2 + SEEDED + [noise] * 3)

    assert [o.token_ids for o in outs[2:5]] == alone
    assert len({tuple(t) for t in alone}) == 3  # really sampled: three different streams


def test_unseeded_requests_follow_the_engine_seed(tiny_ckpt, make_engine, prompts):
    batch = prompts([20, 40], seed=14)
    params = SamplingParams(temperature=1.0, max_tokens=16, ignore_eos=True)

    def run(seed: int) -> list[list[int]]:
        return [o.token_ids for o in make_engine(tiny_ckpt, seed=seed).generate(batch, params)]

    assert run(seed=1) == run(seed=1)
    assert run(seed=1) != run(seed=2)
