"""Labels from the blocked in-attention reduction equal a dense brute-force QKᵀ with GQA grouping."""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F
from helpers.models import tiny_model

from locret_cli.training import labels as labels_module
from locret_cli.training import trainer as trainer_module
from locret_cli.training.data import TokenizedExample
from locret_cli.training.labels import compute_labels
from locret_cli.training.trainer import HeadTrainer, TrainConfig, keep_loss, rank_loss, top_overlap


def brute_force_labels(model, family, ids: list[int], prompt_length: int) -> torch.Tensor:
    """Rebuild every layer's post-RoPE q and k from its input hidden states, take the dense score matrix, reduce."""
    modeling = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    with torch.no_grad():
        hidden = model(torch.tensor([ids]), output_hidden_states=True).hidden_states
        positions = torch.arange(len(ids)).unsqueeze(0)
        out = []
        for layer_idx, layer in enumerate(model.model.layers):
            x = layer.input_layernorm(hidden[layer_idx])
            attn = layer.self_attn
            shape = (1, len(ids), -1, attn.head_dim)
            q = attn.q_proj(x).view(shape).transpose(1, 2)
            k = attn.k_proj(x).view(shape).transpose(1, 2)
            cos, sin = model.model.rotary_emb(x, positions)
            q, k = modeling.apply_rotary_pos_emb(q, k, cos, sin)
            group = q.shape[1] // k.shape[1]
            k = k[0].repeat_interleave(group, dim=0)  # query head h reads KV head h // group
            dense = (q[0] @ k.transpose(-1, -2)) * attn.scaling  # (heads, T, T)
            per_kv = dense[:, prompt_length:, :prompt_length].reshape(-1, group, len(ids) - prompt_length,
                                                                      prompt_length)
            out.append(per_kv.amax(dim=(1, 2)))
    return torch.stack(out)


@pytest.mark.parametrize("family", ["llama", "mistral"])  # with and without GQA
def test_labels_equal_dense_brute_force(family, monkeypatch):
    monkeypatch.setattr(labels_module, "KEY_BLOCK", 7)  # force several blocks on both axes
    monkeypatch.setattr(labels_module, "QUERY_BLOCK", 3)
    model = tiny_model(family)
    ids = torch.randint(2, 300, (40,), generator=torch.Generator().manual_seed(0)).tolist()
    got = compute_labels(model, ids[:31], ids[31:])
    assert got.shape == (2, model.config.num_key_value_heads, 31)
    torch.testing.assert_close(got, brute_force_labels(model, family, ids, 31), rtol=1e-5, atol=1e-5)
    assert model.config._attn_implementation == "sdpa"  # restored


def test_training_takes_the_same_labels_in_its_one_forward(tmp_path, llama, monkeypatch):
    """The trainer reads labels inside the forward that feeds its heads; they equal the standalone labels."""
    prompt, answer = [3, 9, 4, 17, 5, 6, 11], [7, 8, 2]
    seen = {}

    def recording(query, key, prompt_length, scaling):
        labels = compute_one(query, key, prompt_length, scaling)
        seen[len(seen)] = labels
        return labels

    compute_one = trainer_module.answer_to_prompt_max
    monkeypatch.setattr(trainer_module, "answer_to_prompt_max", recording)
    trainer = HeadTrainer(llama, [TokenizedExample(prompt, answer)], tmp_path, TrainConfig(steps=1, hidden=8))
    trainer.run_example(0, train=False)
    torch.testing.assert_close(torch.stack([seen[i] for i in range(len(seen))]), compute_labels(llama, prompt, answer))


def test_top_overlap_counts_shared_top_tokens_per_kv_head():
    target = torch.tensor([[9.0, 0.0], [8.0, 1.0], [0.0, 9.0], [1.0, 8.0]] * 5)  # (20 tokens, 2 KV heads)
    pred = target.clone()
    pred[:, 1] = -pred[:, 1]  # head 0 agrees exactly, head 1 ranks everything backwards
    assert top_overlap(pred, target, fraction=0.1) == 0.5


def test_rank_loss_ignores_an_offset_and_weighs_the_top_of_the_ranking():
    target = torch.tensor([[9.0, 1.0], [1.0, 2.0], [0.0, 9.0], [2.0, 0.0]])  # (4 tokens, 2 KV heads)
    assert rank_loss(target + 5.0, target).item() == pytest.approx(0.0, abs=1e-6)
    top_kept = torch.tensor([[9.0, 1.0], [-6.0, -6.0], [-6.0, 9.0], [-6.0, -6.0]])  # the top right, the rest far off
    top_lost = torch.tensor([[7.0, 2.0], [1.0, 2.0], [0.0, 7.0], [8.0, 9.0]])  # the rest close, a filler token on top
    assert F.smooth_l1_loss(top_kept, target) > F.smooth_l1_loss(top_lost, target)  # SmoothL1 prefers losing the top
    assert rank_loss(top_kept, target) < 0.01 < 1.0 < rank_loss(top_lost, target)


def test_rank_weight_adds_the_rank_loss_to_each_step(tmp_path, llama):
    example = [TokenizedExample([3, 9, 4, 17, 5, 6, 11], [7, 8, 2])]
    losses = {}
    for weight in (0.0, 1.0):
        config = TrainConfig(steps=1, hidden=8, rank_weight=weight)
        trainer = HeadTrainer(llama, example, tmp_path / str(weight), config)
        losses[weight] = trainer.run_example(0, train=False)
    assert losses[1.0][0] > losses[0.0][0]
    assert losses[1.0][1:] == losses[0.0][1:]


def test_keep_loss_wants_kept_tokens_above_the_top_of_the_rest():
    keep = torch.tensor([1, 3])
    above = torch.tensor([[0.0, 0.0], [9.0, 8.0], [1.0, 2.0], [7.0, 9.0], [2.0, 1.0]])  # (5 tokens, 2 KV heads)
    below = torch.tensor([[0.0, 0.0], [1.0, 8.0], [9.0, 2.0], [7.0, 9.0], [2.0, 1.0]])  # token 2 outscores token 1
    assert keep_loss(above, keep, 0.01) < 0.01 < 1.0 < keep_loss(below, keep, 0.01)
    # only the top share of the other tokens counts: lowering the rest's lesser scores changes nothing
    assert keep_loss(above, keep, 0.3) == keep_loss(above - torch.tensor([[5.0, 5.0], [0, 0], [0, 0], [0, 0], [0, 0]]),
                                                    keep, 0.3)


def test_keep_weight_adds_the_keep_loss_only_where_data_name_passages(tmp_path, llama):
    kept = TokenizedExample([3, 9, 4, 17, 5, 6, 11], [7, 8, 2], keep=[2, 3])
    plain = TokenizedExample([3, 9, 4, 17, 5, 6, 11], [7, 8, 2])
    losses = {}
    for weight in (0.0, 1.0):
        trainer = HeadTrainer(llama, [kept, plain], tmp_path / str(weight), TrainConfig(steps=1, hidden=8,
                                                                                       keep_weight=weight))
        losses[weight] = [trainer.run_example(i, train=False) for i in (0, 1)]
    assert losses[1.0][0][0] > losses[0.0][0][0]
    assert losses[1.0][0][1:] == losses[0.0][0][1:]
    assert losses[1.0][1] == losses[0.0][1]
