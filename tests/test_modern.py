"""The modern architecture (ModernBERT's, `electra.model.modern`): it computes what transformers'
ModernBert classes compute, its exports load in them with no electra installed, its FLOPs
follow the dissertation's rules (section 5.2.2) for what it computes, and the objectives train
it."""

from __future__ import annotations

import dataclasses
import json
import math
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import SHARED_DATA
from export_helpers import run_isolated

from electra import flops
from electra.config import ModelConfig, ObjectiveConfig, PretrainConfig
from electra.errors import ElectraError
from electra.model.encoder import init_weights
from electra.model.hf import load_pretrained, model_config_from_hf, save_pretrained
from electra.model.modern import ModernEncoder, blocked_window_mask, window_mask
from electra.model.modern_hf import modernbert_config
from electra.model.networks import Discriminator, Generator
from electra.objectives import REGISTRY

SQUAD_DEV = SHARED_DATA / "squad" / "dev-v1.1.json.gz"
WINDOW = 16  # keys at most 8 positions away: small, so that short test sequences exceed it


def modern_config(vocab_size: int = 120, **changes) -> ModelConfig:
    cfg = ModelConfig(architecture="modern", vocab_size=vocab_size, embedding_size=32,
                      hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                      intermediate_size=48, max_position_embeddings=256,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                      layer_norm_eps=1e-5, local_attention=WINDOW)
    cfg = dataclasses.replace(cfg, **changes)
    cfg.validate()
    return cfg


def randomised(model: torch.nn.Module) -> torch.nn.Module:
    """Initialised as training does, with the LayerNorm weights moved off 1 so that a norm
    mapped to the wrong place would show."""
    init_weights(model, 0.02)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.lower():
                p.add_(0.3 * torch.randn_like(p))
    return model.eval()


def padded_batch(vocab_size: int, seq_len: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Three rows, two of them padded (one to 3 tokens): windowed layers then see queries
    whose window holds no real key."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab_size, (3, seq_len), generator=gen)
    mask = torch.ones(3, seq_len, dtype=torch.long)
    mask[1, seq_len // 2:] = 0
    mask[2, 3:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def test_window_masks_dense_and_blockwise_agree():
    """The blockwise mask holds, for each query, exactly the dense mask's keys."""
    seq_len, half = 37, 4
    keep = torch.ones(2, seq_len, dtype=torch.bool)
    keep[1, 20:] = False
    dense = window_mask(seq_len, half, keep, torch.device("cpu"))
    blocked = blocked_window_mask(seq_len, half, keep, torch.device("cpu"))
    blocks = blocked.shape[2]
    for b in range(2):
        for i in range(seq_len):
            n, a = divmod(i, half)
            keys = [n * half - half + c for c in range(3 * half)
                    if blocked[b, 0, n, a, c] and 0 <= n * half - half + c < seq_len]
            real = [j for j in range(seq_len) if dense[b, 0, i, j]]
            if keep[b, i] or any(keep[b, max(0, i - half):i + half + 1]):
                assert keys == real, (b, i)
    assert blocks == math.ceil(seq_len / half)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_blockwise_attention_equals_dense(impl):
    """Above 1.5 windows the encoder attends blockwise; its outputs at real tokens are the dense
    computation's."""
    torch.manual_seed(0)
    cfg = modern_config()
    encoder = randomised(ModernEncoder(cfg))
    encoder.set_attention_impl(impl)
    batch = padded_batch(cfg.vocab_size, 40)
    x = encoder.embed(batch["input_ids"])
    inputs = encoder.attention_bias(batch["attention_mask"], x)
    assert inputs.local.blocked
    dense_mask = window_mask(40, WINDOW // 2, batch["attention_mask"].bool(), x.device)
    dense = inputs._replace(local=inputs.local._replace(mask=dense_mask, blocked=False))
    with torch.no_grad():
        outs = []
        for attention_inputs in (inputs, dense):
            h = x
            for layer in encoder.layers:
                h = layer(h, attention_inputs)
            outs.append(encoder.final_norm(h))
    real = batch["attention_mask"].bool()
    assert torch.allclose(outs[0][real], outs[1][real], atol=1e-6)
    assert torch.isfinite(outs[0]).all()


def test_layer_pattern_and_shapes():
    """ModernBERT's layer pattern: global attention in layers 0, 3, 6, ...; the first layer has
    no attention norm; no biases but the classifier's; GeGLU's Wi is 2 x intermediate."""
    cfg = modern_config(num_hidden_layers=7)
    model = Discriminator(cfg)
    layers = model.electra.layers
    assert [layer.is_global for layer in layers] == [True, False, False, True, False, False, True]
    assert isinstance(layers[0].attention_norm, torch.nn.Identity)
    assert layers[0].ffn_in.weight.shape == (2 * 48, 32)
    biases = [n for n, _ in model.named_parameters() if n.endswith(".bias")]
    assert biases == ["discriminator_predictions.dense_prediction.bias"]


def test_heads_start_as_modernbert_initialises_them():
    """ModernBERT's `_init_weights` for heads: the prediction head's dense layer at
    std / sqrt(2 x layers), the classifier at hidden**-0.5 (a normal truncated at 2 std has
    std 0.88 sigma)."""
    from electra.finetuning.heads import make_head

    torch.manual_seed(0)
    cfg = modern_config(hidden_size=512, embedding_size=512, num_attention_heads=8,
                        num_hidden_layers=8)
    disc = Discriminator(cfg)
    init_weights(disc, 0.02)
    head = disc.discriminator_predictions
    assert head.dense.weight.std().item() == pytest.approx(0.02 / 4 * 0.88, rel=0.05)
    assert head.dense_prediction.weight.std().item() == pytest.approx(512**-0.5 * 0.88, rel=0.1)
    sequence = make_head("sequence", cfg, 64, 0.1)
    assert sequence.transform.dense.weight.std().item() == pytest.approx(0.02 / 4 * 0.88,
                                                                          rel=0.05)
    assert sequence.out.weight.std().item() == pytest.approx(512**-0.5 * 0.88, rel=0.05)


def test_init_scales_residual_projections():
    """ModernBERT's `_init_weights`: Wo of attention and MLP at std / sqrt(2 x layers)."""
    torch.manual_seed(0)
    cfg = modern_config(hidden_size=256, embedding_size=256, num_attention_heads=4,
                        intermediate_size=384, num_hidden_layers=8)
    model = Discriminator(cfg)
    init_weights(model, 0.02)
    layer = model.electra.layers[1]
    assert layer.ffn_in.weight.std().item() == pytest.approx(0.02 * 0.88, rel=0.05)
    out_std = 0.02 / math.sqrt(16) * 0.88  # a normal truncated at 2 std has std 0.88 sigma
    assert layer.attention_out.weight.std().item() == pytest.approx(out_std, rel=0.05)
    assert layer.ffn_out.weight.std().item() == pytest.approx(out_std, rel=0.05)


# --- transformers, in a process without electra ---------------------------------------------

LOADER = textwrap.dedent("""
    import json, sys
    import torch
    import transformers
    cases = json.load(open(sys.argv[1]))
    report = {}
    for case in cases:
        model = getattr(transformers, case["auto"]).from_pretrained(case["dir"]).eval()
        model.config._attn_implementation = case["attn"]
        batch = torch.load(case["batch"])
        expected = torch.load(case["expected"])
        with torch.no_grad():
            out = getattr(model(**batch), case["output"])
        real = batch["attention_mask"].bool()
        report[case["name"]] = {"class": type(model).__name__,
                                "max_abs_diff": float((out[real] - expected[real]).abs().max())}
    report["electra imported"] = any(m == "electra" or m.startswith("electra.")
                                     for m in sys.modules)
    print(json.dumps(report))
""")


def test_exports_load_in_native_modernbert_classes(tmp_path, vocab_dir):
    """The discriminator loads as ModernBertForTokenClassification (one label), the generator
    as ModernBertForMaskedLM, with no remote code and no electra: within 1e-5 of ours at every
    real token of padded batches, with the window in play (sequences of 12 and 40 tokens
    against a 16-token window: the dense and the blockwise path), in eager and SDPA."""
    pytest.importorskip("transformers")
    vocab_size = sum(1 for _ in open(vocab_dir / "vocab.txt", encoding="utf-8"))
    cfg = modern_config(vocab_size)
    torch.manual_seed(0)
    cases = []
    for kind, model, auto in (("disc", Discriminator(cfg), "AutoModelForTokenClassification"),
                              ("gen", Generator(cfg), "AutoModelForMaskedLM")):
        randomised(model)
        directory = save_pretrained(model, tmp_path / kind, vocab_dir)
        assert "auto_map" not in json.loads((directory / "config.json").read_text())
        for seq_len in (12, 40):
            batch = padded_batch(vocab_size, seq_len)
            torch.save(batch, tmp_path / f"batch{seq_len}.pt")
            with torch.no_grad():
                ours = model(batch["input_ids"], None, batch["attention_mask"])
            if kind == "disc":
                ours = ours.unsqueeze(-1)
            expected = tmp_path / f"{kind}{seq_len}.pt"
            torch.save(ours, expected)
            for attn in ("eager", "sdpa"):
                cases.append({"name": f"{kind}-{seq_len}-{attn}", "dir": str(directory),
                              "auto": auto, "attn": attn, "output": "logits",
                              "batch": str(tmp_path / f"batch{seq_len}.pt"),
                              "expected": str(expected)})
        reloaded = load_pretrained(directory).eval()
        assert type(reloaded) is type(model)
        for (name, a), b in zip(model.state_dict().items(), reloaded.state_dict().values(),
                                strict=True):
            assert torch.equal(a, b), name
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    report = run_isolated(LOADER, [str(tmp_path / "cases.json")], tmp_path)
    assert report.pop("electra imported") is False
    assert len(report) == 8
    for name, result in report.items():
        assert result["max_abs_diff"] < 1e-5, (name, result)
    assert report["disc-40-sdpa"]["class"] == "ModernBertForTokenClassification"
    assert report["gen-40-eager"]["class"] == "ModernBertForMaskedLM"


def test_config_round_trip():
    cfg = modern_config(num_hidden_layers=7, global_attn_every_n_layers=2,
                        local_attention=64, global_rope_theta=80_000.0)
    data = modernbert_config(cfg, "ModernBertModel")
    assert data["layer_types"][:3] == ["full_attention", "sliding_attention", "full_attention"]
    back = model_config_from_hf(data)
    assert back == dataclasses.replace(cfg, type_vocab_size=1)


def test_released_modernbert_pooling_is_read_where_it_matters():
    """ModernBERT-base and -large ship classifier_pooling "mean": only their sequence
    classifier reads it, so an MLM checkpoint with it loads, and a classifier does not."""
    data = modernbert_config(modern_config(), "ModernBertForMaskedLM") | {
        "classifier_pooling": "mean"}
    assert model_config_from_hf(data).architecture == "modern"
    data["architectures"] = ["ModernBertForSequenceClassification"]
    with pytest.raises(ElectraError, match="classifier_pooling='mean'"):
        model_config_from_hf(data)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("layer_types", ["full_attention", "full_attention", "sliding_attention",
                     "sliding_attention"], "layer_types"),
    ("hidden_activation", "silu", "hidden_activation='silu'"),
    ("norm_bias", True, "norm_bias=True"),
    ("rope_parameters", {"full_attention": {"rope_type": "linear", "factor": 2.0}},
     "rope_parameters.full_attention.rope_type 'linear'"),
    ("head_dim", 8, "head_dim=8"),
])
def test_inexpressible_checkpoint_is_one_line_naming_the_field(field, value, message):
    data = modernbert_config(modern_config(), "ModernBertModel")
    data[field] = value
    with pytest.raises(ElectraError, match="config.json: .*" + message.replace("(", r"\(")) as e:
        model_config_from_hf(data)
    assert "\n" not in str(e.value)


# --- FLOPs -----------------------------------------------------------------------------------

def test_flops_against_a_hand_count():
    """One sequence of 10 tokens through a 2-layer modern encoder (H 4, 2 heads of 2, I 6,
    V 10, window 4: keys at most 2 away), counted by hand with the section 5.2.2 rules."""
    cfg = modern_config(vocab_size=10, embedding_size=4, hidden_size=4, num_attention_heads=2,
                        intermediate_size=6, num_hidden_layers=2, local_attention=4,
                        global_attn_every_n_layers=2)
    s = 10
    # Embeddings: one-hot lookup 2*4*10 = 80, LayerNorm without bias 4*4 = 16 (no dropout);
    # cos/sin tables for the global and the local layers, 2.5 per position and head dim (2).
    embeddings = s * (80 + 16) + 2 * s * 2.5 * 2
    assert flops.embedding_flops(cfg, s) == embeddings
    # Per token, layer 0 (no attention norm): QKV 2*4*12 = 96, rotary 2 * 3.5 * 4 = 28,
    # Wo 32 + residual 4, MLP norm 16, Wi 2*4*12 = 96, GELU 8*6 = 48, gate 6, Wo 2*6*4 = 48,
    # residual 4.
    per_token0 = 96 + 28 + 32 + 4 + 16 + 96 + 48 + 6 + 48 + 4
    # Scores and probabilities x values: 4 per head dimension per pair = 16 per pair; softmax 5
    # and the 1/sqrt(d) scale per pair and head: 12 per pair.
    per_pair = 16 + 12
    global_pairs = s * s
    # Layer 1 is windowed: keys within 2 positions, 3+4+5*6+4+3 = 44 pairs.
    assert flops.attended_pairs(s, 2) == 44
    layer0 = s * per_token0 + per_pair * global_pairs
    layer1 = s * (per_token0 + 16) + per_pair * 44  # with its attention norm
    final_norm = s * 16
    assert flops.layers_flops(cfg, s) == layer0 + layer1 + final_norm
    # Heads: RTD dense 2*4*4 = 32, GELU 32, LayerNorm 16, H->1 8 (its bias uncounted, as in
    # the BERT architecture's rule).
    assert flops.binary_head_flops(cfg, s) == s * (32 + 32 + 16 + 8)
    # MLM head at every position: dense 32, GELU 32, LayerNorm 16, logits 2*4*10 = 80,
    # softmax 5*10 = 50, picking the target 2*10 = 20.
    assert flops.mlm_head_flops(cfg, s, 1.0) == s * (32 + 32 + 16 + 80 + 50 + 20)


def test_params_match_the_modules():
    cfg = dataclasses.replace(PretrainConfig.from_preset("tiny-modern").model, vocab_size=1000)
    model = Discriminator(cfg)
    assert flops.encoder_params(cfg) == sum(p.numel() for p in model.electra.parameters())


def test_base_modern_is_modernbert_base():
    """base-modern has ModernBERT-base's shape (149M parameters with its 50,368-token
    vocabulary, as the ModernBERT paper's Table 3 lists)."""
    cfg = PretrainConfig.from_preset("base-modern")
    m = cfg.model
    assert (m.num_hidden_layers, m.hidden_size, m.intermediate_size, m.num_attention_heads,
            m.local_attention, m.global_rope_theta, m.local_rope_theta,
            m.max_position_embeddings) == (22, 768, 1152, 12, 128, 160_000.0, 10_000.0, 8192)
    params = flops.encoder_params(dataclasses.replace(m, vocab_size=50368))
    assert round(params / 1e6) == 149
    assert (cfg.objective.generator_multiplier, cfg.objective.generator_layers) == (1.0, 11)


# --- objectives ------------------------------------------------------------------------------

def _tiny_run(data_dir: Path, out: Path, objective: str, steps: int = 4, **objective_sets):
    from electra.pretraining.loop import pretrain

    cfg = PretrainConfig.from_preset("tiny-modern")
    cfg.model = dataclasses.replace(cfg.model, hidden_size=32, embedding_size=32,
                                    intermediate_size=48, num_hidden_layers=4,
                                    local_attention=WINDOW)
    cfg.objective = dataclasses.replace(cfg.objective, name=objective, generator_layers=2,
                                        **objective_sets)
    cfg.train.steps, cfg.train.batch_size, cfg.train.warmup_steps = steps, 4, 1
    cfg.train.log_every, cfg.train.eval_every = 2, 0
    return pretrain(cfg, data_dir, out, device="cpu", show_progress=False)


@pytest.mark.parametrize("sharing", ["embeddings", "gdes"])
def test_electra_trains_it_with_a_shallower_generator(tmp_path, data_dir, sharing):
    from electra.objectives import build_objective

    _tiny_run(data_dir, tmp_path / "run", "electra", sharing=sharing)
    logged = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    losses = [row["disc_loss"] for row in logged if "disc_loss" in row]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    disc = load_pretrained(tmp_path / "run" / "final" / "discriminator")
    gen = load_pretrained(tmp_path / "run" / "final" / "generator")
    assert (len(disc.electra.layers), len(gen.electra.layers)) == (4, 2)
    assert gen.config.hidden_size == disc.config.hidden_size
    cfg = modern_config(vocab_size=disc.config.vocab_size)
    objective = build_objective(cfg, ObjectiveConfig(generator_multiplier=1.0,
                                                     generator_layers=2, sharing=sharing))
    if sharing == "embeddings":
        assert objective.generator.electra.embeddings is objective.discriminator.electra.embeddings


def test_narrow_generator_cannot_share_modern_embeddings():
    from electra.objectives import build_objective

    for name in ("electra", "electric", "electra-tt"):
        with pytest.raises(ElectraError, match="generator_multiplier=1.0"):
            build_objective(modern_config(), ObjectiveConfig(name=name,
                                                             generator_multiplier=0.5))
    objective = build_objective(modern_config(), ObjectiveConfig(generator_multiplier=0.5,
                                                                 sharing="none"))
    assert objective.generator.config.embedding_size == 16


@pytest.mark.parametrize("objective", sorted(REGISTRY))
def test_every_objective_trains_it(tmp_path, data_dir, objective):
    """Two steps of each objective on the modern architecture: finite losses, and the
    network fine-tuning starts from is exported as a modern model."""
    _tiny_run(data_dir, tmp_path / "run", objective, steps=2)
    logged = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert all(math.isfinite(row["loss"]) for row in logged if "loss" in row)
    final = tmp_path / "run" / "final"
    main = final / ("discriminator" if (final / "discriminator").is_dir() else "model")
    model = load_pretrained(main)
    assert model.config.architecture == "modern" and len(model.electra.layers) == 4


def test_init_from_a_transformers_checkpoint(tmp_path, data_dir):
    """A ModernBertForMaskedLM written by transformers' save_pretrained starts the
    discriminator (its encoder exactly), with a fresh half-depth generator, or continues as
    the generator when given with --init-generator."""
    transformers = pytest.importorskip("transformers")
    from electra.data.dataset import read_manifest
    from electra.objectives import build_objective
    from electra.pretraining.init_from import adopt_checkpoint, find_source, load_weights

    vocab_size = read_manifest(data_dir)["vocab_size"]
    hf_cfg = transformers.ModernBertConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
        num_attention_heads=2, local_attention=WINDOW, pad_token_id=0, bos_token_id=None,
        eos_token_id=None, cls_token_id=None, sep_token_id=None, max_position_embeddings=256)
    torch.manual_seed(0)
    theirs = transformers.ModernBertForMaskedLM(hf_cfg)
    theirs.save_pretrained(tmp_path / "hf")
    for generator_dir in (None, tmp_path / "hf"):
        source = find_source(tmp_path / "hf", generator_dir, "electra")
        cfg = PretrainConfig.from_preset("tiny-modern")
        adopt_checkpoint(cfg, source)
        assert cfg.model.architecture == "modern" and cfg.model.num_hidden_layers == 4
        assert cfg.objective.generator_layers == (2 if generator_dir is None else None)
        objective = build_objective(cfg.model, cfg.objective)
        load_weights(objective, source)
        ours = objective.discriminator.electra.eval()
        batch = padded_batch(vocab_size, 40)
        with torch.no_grad():
            expected = theirs.model(**batch).last_hidden_state
            got = ours(batch["input_ids"], None, batch["attention_mask"])
        real = batch["attention_mask"].bool()
        assert (got[real] - expected[real]).abs().max() < 1e-5
        if generator_dir is not None:
            with torch.no_grad():
                gen_logits = objective.generator(batch["input_ids"], None,
                                                 batch["attention_mask"])
                assert (gen_logits[real] - theirs(**batch).logits[real]).abs().max() < 1e-5


# --- fine-tuned models -----------------------------------------------------------------------

SERVER = textwrap.dedent("""
    import json, sys
    import torch
    import transformers
    cases = json.load(open(sys.argv[1]))
    report = {}
    for case in cases:
        model = getattr(transformers, case["auto"]).from_pretrained(case["dir"]).eval()
        batch = torch.load(case["batch"])
        with torch.no_grad():
            out = model(**batch).logits
        expected = torch.load(case["expected"])
        if out.dim() == 3:  # per token: the real tokens
            real = batch["attention_mask"].bool()
            out, expected = out[real], expected[real]
        task = "text-classification" if out.dim() == 2 and case["auto"].endswith(
            "SequenceClassification") else "token-classification"
        served = transformers.pipeline(task, model=case["dir"])(["a film", "of a kind"])
        report[case["dir"]] = {"class": type(model).__name__,
                               "max_abs_diff": float((out - expected).abs().max()),
                               "served": len(served)}
    report["electra imported"] = any(m == "electra" or m.startswith("electra.")
                                     for m in sys.modules)
    print(json.dumps(report))
""")


def test_finetuned_models_load_in_native_modernbert_classes(tmp_path, vocab_dir):
    """A fine-tuned classifier, regressor and tagger load as ModernBertForSequenceClassification
    / ModernBertForTokenClassification, with no remote code and no electra, and serve in
    pipelines; electra's own loader reads them back exactly. SQuAD 2.0 is refused in one
    line."""
    pytest.importorskip("transformers")
    from export_helpers import task_named

    from electra.finetuning.heads import FinetuneModel
    from electra.finetuning.model_io import load_finetuned, save_finetuned
    from electra.model.networks import build_encoder

    vocab_size = sum(1 for _ in open(vocab_dir / "vocab.txt", encoding="utf-8"))
    cases = []
    batch = padded_batch(vocab_size, 40)
    torch.save(batch, tmp_path / "batch.pt")
    for name, auto in (("SST-2", "AutoModelForSequenceClassification"),
                       ("STS-B", "AutoModelForSequenceClassification"),
                       ("chunk", "AutoModelForTokenClassification")):
        torch.manual_seed(1)
        task = task_named(name)
        model = randomised(FinetuneModel(build_encoder(modern_config(vocab_size)),
                                         task.head_kind, task.num_outputs))
        info = {"task": task.state(), "head_kind": task.head_kind,
                "num_outputs": task.num_outputs, "settings": {"max_seq_len": 64}}
        directory = save_finetuned(model, tmp_path / name, vocab_dir, info)
        with torch.no_grad():
            ours = model(batch | {"token_type_ids": None})
        torch.save(ours, tmp_path / f"{name}.pt")
        cases.append({"dir": str(directory), "auto": auto, "batch": str(tmp_path / "batch.pt"),
                      "expected": str(tmp_path / f"{name}.pt")})
        reloaded, _, _ = load_finetuned(directory)
        for (key, a), b in zip(model.state_dict().items(), reloaded.state_dict().values(),
                               strict=True):
            assert torch.equal(a, b), key
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    report = run_isolated(SERVER, [str(tmp_path / "cases.json")], tmp_path)
    assert report.pop("electra imported") is False
    classes = {Path(d).name: r["class"] for d, r in report.items()}
    assert classes == {"SST-2": "ModernBertForSequenceClassification",
                       "STS-B": "ModernBertForSequenceClassification",
                       "chunk": "ModernBertForTokenClassification"}
    for result in report.values():
        assert result["max_abs_diff"] < 1e-5 and result["served"] == 2
    with pytest.raises(ElectraError, match="SQuAD 2.0 is not supported for the modern"):
        FinetuneModel(build_encoder(modern_config(vocab_size)), "span", 3)
    with pytest.raises(ElectraError, match="sigmoid regression head"):
        FinetuneModel(build_encoder(modern_config(vocab_size)), "regression", 1)


QA_SERVER = textwrap.dedent("""
    import json, sys
    import torch
    import transformers
    directory, batch_path, expected_path = sys.argv[1:4]
    model = transformers.AutoModelForQuestionAnswering.from_pretrained(directory).eval()
    with torch.no_grad():
        out = model(**torch.load(batch_path))
    start, end, real = torch.load(expected_path)
    diff = max(float((out.start_logits[real] - start[real]).abs().max()),
               float((out.end_logits[real] - end[real]).abs().max()))
    try:  # transformers 5 removed the question-answering pipeline
        answer = transformers.pipeline("question-answering", model=directory)(
            question="who enjoys every scene?",
            context="the actors seem to enjoy every scene of it")["answer"]
    except KeyError:
        answer = None
    print(json.dumps({"class": type(model).__name__, "max_abs_diff": diff, "answer": answer,
                      "electra imported": any(m == "electra" or m.startswith("electra.")
                                              for m in sys.modules)}))
""")


@pytest.mark.skipif(not SQUAD_DEV.is_file(), reason=f"SQuAD v1.1 dev absent ({SQUAD_DEV})")
def test_squad_model_trains_and_loads_as_modernbert_for_question_answering(tmp_path, data_dir,
                                                                           capsys):
    """`electra finetune --task squad` trains a modern model with BERT's start/end head, scores
    it as the official script does, and writes a ModernBertForQuestionAnswering that gives its
    serving start and end logits on a padded batch (within 1e-5, no electra imported) and
    answers in the question-answering pipeline where the installed transformers still has one.
    SQuAD 2.0 is refused before anything is written."""
    pytest.importorskip("transformers")
    from electra.cli import main
    from electra.finetuning.model_io import load_finetuned
    from electra.model.task_heads import serving_outputs
    from electra.tasks.squad import split_squad_file

    _tiny_run(data_dir, tmp_path / "pre", "electra")
    split_squad_file(SQUAD_DEV, tmp_path / "data", dev_fraction=0.2)
    out = tmp_path / "squad"
    assert main(["finetune", "--model", str(tmp_path / "pre" / "final" / "discriminator"),
                 "--task", "squad", "--data", str(tmp_path / "data"), "--out", str(out),
                 "--max-train-examples", "32", "--max-eval-examples", "16", "--max-seq-len",
                 "128", "--doc-stride", "64", "--max-query-len", "32", "--epochs", "1",
                 "--batch-size", "8", "--quiet"]) == 0
    scores = json.loads((out / "results.json").read_text())["seeds"][0]["scores"]
    assert set(scores) == {"exact_match", "f1"} and 0.0 <= scores["f1"] <= 100.0
    assert main(["finetune", "--model", str(tmp_path / "pre" / "final" / "discriminator"),
                 "--task", "squad2", "--data", str(tmp_path / "data"), "--out",
                 str(tmp_path / "squad2")]) == 1  # refused before any data is read
    assert "SQuAD 2.0 is not supported for the modern architecture" in capsys.readouterr().err
    assert not (tmp_path / "squad2").exists()

    model, _, info = load_finetuned(out / "model")
    assert info["head_kind"] == "span"
    vocab_size = model.encoder.config.vocab_size
    batch = padded_batch(vocab_size, 40)
    with torch.no_grad():  # what a server gets: the ONNX graph computes this
        hidden = model.eval().encoder(batch["input_ids"], None, batch["attention_mask"])
        start, end = serving_outputs("span", model.task_head, hidden, batch["attention_mask"],
                                     torch.zeros_like(batch["input_ids"]))
    torch.save(batch, tmp_path / "batch.pt")
    torch.save((start, end, batch["attention_mask"].bool()), tmp_path / "expected.pt")
    report = run_isolated(QA_SERVER, [str(out / "model"), str(tmp_path / "batch.pt"),
                                      str(tmp_path / "expected.pt")], tmp_path)
    assert report["class"] == "ModernBertForQuestionAnswering"
    assert report["electra imported"] is False
    assert report["max_abs_diff"] < 1e-5
    if report["answer"] is not None:
        assert report["answer"] in "the actors seem to enjoy every scene of it"


def test_multitask_model_exports_its_encoder_as_modernbert_model(tmp_path, vocab_dir):
    """A BAM model of the modern architecture is served as ModernBertModel (its shared encoder),
    and electra reads its heads back exactly."""
    transformers = pytest.importorskip("transformers")
    from export_helpers import task_named

    from electra.finetuning.heads import MultitaskModel, make_head
    from electra.finetuning.model_io import load_finetuned, save_finetuned
    from electra.model.networks import build_encoder

    vocab_size = sum(1 for _ in open(vocab_dir / "vocab.txt", encoding="utf-8"))
    cfg = modern_config(vocab_size)
    tasks = {name: task_named(name) for name in ("SST-2", "chunk")}
    torch.manual_seed(2)
    model = randomised(MultitaskModel(build_encoder(cfg), {
        name: make_head(t.head_kind, cfg, t.num_outputs, 0.1) for name, t in tasks.items()}))
    info = {"tasks": [{"task": t.state(), "head_kind": t.head_kind,
                       "num_outputs": t.num_outputs} for t in tasks.values()],
            "settings": {"max_seq_len": 64}}
    directory = save_finetuned(model, tmp_path / "bam", vocab_dir, info)
    reloaded, _, _ = load_finetuned(directory)
    for (key, a), b in zip(model.state_dict().items(), reloaded.state_dict().values(),
                           strict=True):
        assert torch.equal(a, b), key
    theirs = transformers.AutoModel.from_pretrained(directory).eval()
    assert type(theirs).__name__ == "ModernBertModel"
    batch = padded_batch(vocab_size, 40)
    with torch.no_grad():
        ours = model.encoder(batch["input_ids"], None, batch["attention_mask"])
        hidden = theirs(**batch).last_hidden_state
    real = batch["attention_mask"].bool()
    assert (ours[real] - hidden[real]).abs().max() < 1e-5


def test_onnx_export_runs_like_pytorch(tmp_path, vocab_dir):
    """`electra export --onnx` of a modern discriminator: ONNX Runtime within 1e-4 of PyTorch
    on 40-token padded rows (PyTorch attends blockwise there; the graph, traced for any
    length, densely)."""
    for package in ("onnx", "onnxruntime", "onnxscript"):
        pytest.importorskip(package)
    import onnxruntime

    from electra.cli import main as electra
    from electra.exporting.serving import INPUT_NAMES, load_served

    vocab_size = sum(1 for _ in open(vocab_dir / "vocab.txt", encoding="utf-8"))
    torch.manual_seed(0)
    model_dir = save_pretrained(randomised(Discriminator(modern_config(vocab_size))),
                                tmp_path / "disc", vocab_dir)
    assert electra(["export", "--onnx", str(tmp_path / "onnx"), str(model_dir)]) == 0
    batch = padded_batch(vocab_size, 40) | {"token_type_ids": torch.zeros(3, 40, dtype=torch.long)}
    served = load_served(model_dir)
    with torch.no_grad():
        [expected] = served.module(*(batch[n] for n in INPUT_NAMES))
    session = onnxruntime.InferenceSession(str(tmp_path / "onnx" / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    [got] = session.run(None, {n: batch[n].numpy() for n in INPUT_NAMES})
    real = batch["attention_mask"].bool()
    assert float((torch.from_numpy(got)[real] - expected[real]).abs().max()) < 1e-4


# --- long context ----------------------------------------------------------------------------

def test_pretrain_and_finetune_at_1024_tokens(tmp_path, corpus_file, vocab_dir, capsys):
    """Data prepared at 1,024 tokens (above the BERT presets' 512 positions) pre-trains a modern
    model, and fine-tuning runs at --max-seq-len 1024 on inputs longer than that."""
    from electra.cli import main as electra
    from electra.data.prepare import prepare_corpus

    data = prepare_corpus([corpus_file], vocab_dir, 1024, tmp_path / "data", heldout_fraction=0.1,
                          shard_tokens=20_000, batch_docs=32, show_progress=False)
    assert data["seq_len"] == 1024
    run = tmp_path / "run"
    cfg = ["--preset", "tiny-modern", "--set", "model.hidden_size=32", "--set",
           "model.embedding_size=32", "--set", "model.intermediate_size=48", "--set",
           "model.num_hidden_layers=4", "--set", "model.local_attention=16", "--set",
           "objective.generator_layers=2"]
    assert electra(["pretrain", "--data", str(tmp_path / "data"), "--out", str(run), "--steps",
                    "2", "--batch-size", "2", "--quiet", *cfg]) == 0
    words = [line.strip() for line in open(vocab_dir / "vocab.txt", encoding="utf-8")
             if line.strip().isalpha()][:200]
    glue = tmp_path / "glue" / "SST-2"
    glue.mkdir(parents=True)
    gen = torch.Generator().manual_seed(0)
    for split, n in (("train", 8), ("dev", 4)):
        rows = [" ".join(words[i] for i in torch.randint(len(words), (1500,), generator=gen))
                + f"\t{k % 2}" for k in range(n)]
        (glue / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    out = tmp_path / "ft"
    assert electra(["finetune", "--model", str(run / "final" / "discriminator"), "--task",
                    "SST-2", "--data", str(tmp_path / "glue"), "--out", str(out),
                    "--max-seq-len", "1024", "--epochs", "1", "--seeds", "1", "--batch-size",
                    "4", "--quiet"]) == 0
    info = json.loads((out / "model" / "finetune.json").read_text())
    assert info["settings"]["max_seq_len"] == 1024
    capsys.readouterr()
    assert electra(["finetune", "--model", str(run / "final" / "discriminator"), "--task",
                    "SST-2", "--data", str(tmp_path / "glue"), "--out", str(tmp_path / "ft2"),
                    "--max-seq-len", "9000", "--quiet"]) != 0
    err = capsys.readouterr().err.strip()
    assert err.endswith("max_seq_len 9000 exceeds the model's max_position_embeddings (8192)")
    assert "\n" not in err and not (tmp_path / "ft2").exists()


def test_long_context_benchmark_reports_memory_per_length(tmp_path):
    from benchmarks import long_context

    report = long_context.main(["--work", str(tmp_path), "--lengths", "64,128,256",
                                "--variants", "modern", "--steps", "1"])
    runs = report["variants"]["modern"]["runs"]
    assert [r.get("error") for r in runs] == [None, None, None]
    assert [r["length"] for r in runs] == [64, 128, 256]
    assert all(r["median_step_s"] > 0 and "step_peak_mb_per_1k_tokens" in r for r in runs)
    # at these lengths the peaks are within the allocator's noise: growth is reported only
    # where the first doubling grew
    assert all(g["lengths"] == [64, 128, 256] for g in report["variants"]["modern"]["growth"])
    assert (tmp_path / "results" / "modern-256.json").is_file()


def test_score_with_a_modern_generator(tmp_path, vocab_dir):
    """`electra score` reads a ModernBertForMaskedLM export: one finite PLL per text."""
    from electra.cli import main as electra

    vocab_size = sum(1 for _ in open(vocab_dir / "vocab.txt", encoding="utf-8"))
    torch.manual_seed(0)
    model_dir = save_pretrained(randomised(Generator(modern_config(vocab_size))),
                                tmp_path / "gen", vocab_dir)
    (tmp_path / "sents.txt").write_text("the film was fine\na plot with no surprises\n")
    assert electra(["score", "--model", str(model_dir), "--input", str(tmp_path / "sents.txt"),
                    "--out", str(tmp_path / "s.jsonl")]) == 0
    rows = [json.loads(line) for line in open(tmp_path / "s.jsonl")]
    assert len(rows) == 2 and all(math.isfinite(r["pll"]) and r["pll"] < 0 for r in rows)
