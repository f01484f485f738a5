"""The family registry (`core/families.py`), entry by entry: a tiny random model of each entry's model type passes
the load checks, has the projections and sliding layers the entry claims, gets the decode step it claims, and reads
and answers through the engine; its GGUF name passes the GGUF check. Any other model type is refused in one line."""

from __future__ import annotations

import pytest
import torch
from helpers.engines import chunks_of, random_ids
from helpers.models import VOCAB
from transformers import AutoConfig, AutoModelForCausalLM, Gemma3Config, GenerationConfig, GPT2Config

from locret_cli.core.answer.compiled_step import CompiledStep
from locret_cli.core.answer.decode_step import DecodeStep
from locret_cli.core.attention.capture import check_projections
from locret_cli.core.attention.rope import check_supported
from locret_cli.core.engine import Engine
from locret_cli.core.families import FAMILIES, Family, family_of, spoken
from locret_cli.core.heads import RetainingHeads
from locret_cli.core.policies.full import FullPolicy
from locret_cli.core.policies.locret import LocretPolicy
from locret_cli.core.shape import layer_windows
from locret_cli.core.transformers_internals import projections
from locret_cli.errors import ModelError
from locret_cli.settings import AnswerSettings, ReadSettings

WINDOW, LAYERS = 8, 2
SLIDING_KINDS = ["sliding_attention", "full_attention"]  # a sliding family's layer 0 slides under a global layer 1


def tiny_config(family: Family, **overrides):
    """A 2-layer config of the family's model type: GQA, a window of WINDOW on layer 0 where the family slides."""
    layers = {"sliding_window": WINDOW, "layer_types": SLIDING_KINDS} if family.sliding_layers else \
        {"sliding_window": None}
    return AutoConfig.for_model(
        family.model_type, vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512, bos_token_id=0,
        eos_token_id=1, pad_token_id=0, **{**layers, **overrides})


def tiny_model(config):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    model.config._attn_implementation = "sdpa"
    model.generation_config = GenerationConfig()  # no end token: `generate` gives every token asked for
    return model


@pytest.fixture(scope="module", params=list(FAMILIES.values()), ids=lambda family: family.model_type)
def entry(request) -> tuple[Family, torch.nn.Module]:
    return request.param, tiny_model(tiny_config(request.param))


def read(model, policy, settings: ReadSettings, document: list[int], answering: AnswerSettings) -> Engine:
    engine = Engine(model, policy, settings, answering=answering)
    engine.read(chunks_of(document, settings.chunk_size))
    return engine


def test_the_model_passes_the_load_checks_and_has_the_projections_and_windows_claimed(entry):
    family, model = entry
    check_supported(model.config)
    assert family_of(model.config) is family
    attentions = check_projections(model)
    assert [len(projections(attention)) for attention in attentions] == [1 if family.fused_qkv else 3] * LAYERS
    assert layer_windows(model.config) == ([WINDOW, None] if family.sliding_layers else [None] * LAYERS)


def test_the_decode_step_is_chosen_exactly_for_plain_llama_layers_without_a_window(entry):
    family, model = entry
    assert DecodeStep.fits(model) is CompiledStep.fits(model) is family.plain_llama_layers
    step = Engine(model, FullPolicy(), ReadSettings(budget=40, chunk_size=8, stabilizers=0)).step
    assert type(step) is DecodeStep if family.plain_llama_layers else step is None
    if family.plain_llama_layers:  # unless a window is set on its layers
        config = tiny_config(family)
        config.sliding_window, config.layer_types = WINDOW, ["sliding_attention"] * LAYERS
        windowed = tiny_model(config)
        assert DecodeStep.fits(windowed) is CompiledStep.fits(windowed) is False


def test_a_bounded_read_keeps_the_budget_and_answers(entry):
    family, model = entry
    torch.manual_seed(2)
    heads = RetainingHeads.for_model(model)
    settings = ReadSettings(budget=16, chunk_size=8, stabilizers=4)
    engine = read(model, LocretPolicy(heads), settings, random_ids(48), AnswerSettings(max_new_tokens=4))
    assert engine.cache.length() == 16 and engine.cache.peak_tokens == 16 + 8
    sliding = [layer.length for layer, window in zip(engine.cache.layers, layer_windows(model.config)) if window]
    assert sliding == ([WINDOW - 1] if family.sliding_layers else [])
    assert len(engine.answer([3, 4, 5]).token_ids) == 4


def test_an_answer_over_a_full_cache_is_transformers_greedy_answer(entry):
    _, model = entry
    document, question = random_ids(40), [3, 4, 5]
    settings = ReadSettings(budget=4096, chunk_size=8, stabilizers=0, positions="original")
    engine = read(model, FullPolicy(), settings, document, AnswerSettings(max_new_tokens=8))
    with torch.no_grad():
        out = model.generate(torch.tensor([document + question]), max_new_tokens=8, do_sample=False)
    assert engine.answer(question).token_ids == out[0, len(document) + len(question):].tolist()


@pytest.mark.parametrize("family", [f for f in FAMILIES.values() if f.gguf_architecture is not None],
                         ids=lambda family: family.model_type)
def test_the_gguf_architecture_is_accepted_and_readable_by_transformers(family, tmp_path):
    gguf_package = pytest.importorskip("gguf", reason="GGUF support is the [gguf] extra")
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    from locret_cli.models import gguf

    path = tmp_path / "header.gguf"
    writer = gguf_package.GGUFWriter(str(path), family.gguf_architecture)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    assert gguf.check_supported(path) == family.gguf_architecture
    assert family.gguf_architecture in GGUF_SUPPORTED_ARCHITECTURES


def test_a_model_with_a_text_decoder_is_of_its_decoders_family():
    assert family_of(Gemma3Config()) is FAMILIES["gemma3_text"]


def test_an_unknown_model_type_is_refused_in_one_line_naming_the_supported_ones():
    expected = f"model type 'gpt2' is not supported; locret handles {', '.join(FAMILIES)}"
    for check in (family_of, check_supported):
        with pytest.raises(ModelError) as refused:
            check(GPT2Config())
        assert str(refused.value) == expected


def test_families_are_listed_as_a_sentence_lists_them():
    one, two, three = (Family(model_type, name, None) for model_type, name in (("a", "A"), ("b", "B"), ("c", "C")))
    assert (spoken([one]), spoken([one, two]), spoken([one, two, three])) == ("A", "A and B", "A, B and C")
