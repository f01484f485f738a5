"""label_ceiling's attention mass equals the model's own attention weights, summed as documented, and its counts
keep exactly the statements whose best score beats the filler's quantile."""

from __future__ import annotations

import torch
from helpers.models import VOCAB, tiny_model

from locret_cli.core.attention.probe import observe_attention
from research.embedded.label_ceiling import MASS_FLOOR, attention_mass, kept_counts


def test_attention_mass_sums_the_models_own_attention_over_answers_and_query_groups():
    model = tiny_model("llama")  # 4 query heads on 2 KV heads
    ids = torch.randint(2, VOCAB, (1, 30), generator=torch.Generator().manual_seed(1))
    prompt_length = 24
    got = {}

    def observe(layer, query, key, scaling):
        got[layer] = attention_mass(query, key, prompt_length, scaling)

    with torch.no_grad(), observe_attention(model, observe):
        model.model(input_ids=ids)
    model.config._attn_implementation = "eager"
    with torch.no_grad():
        weights = model.model(input_ids=ids, output_attentions=True).attentions  # per layer (1, heads, T, T)
    for layer, attention in enumerate(weights):
        answers = attention[0, :, prompt_length:, :prompt_length]  # (heads, answer positions, prompt)
        expected = answers.reshape(2, -1, prompt_length).sum(1).clamp_min(MASS_FLOOR).log()
        torch.testing.assert_close(got[layer], expected, rtol=1e-4, atol=1e-5)


def test_kept_counts_statements_whose_best_score_beats_the_filler_quantile():
    filler = torch.arange(100.0)  # one layer, one KV head, scores 0..99 at positions 0..99
    first, second = filler.clone(), filler.clone()
    first[10:13] = torch.tensor([1.0, 98.5, 2.0])  # best entry above the filler's 98th-percentile score
    second[50:52] = torch.tensor([0.5, 0.5])  # never above it
    documents = [([first[None]], [(10, 13)]), ([second[None]], [(50, 52)])]
    # the filler, statements left out, is 195 scores; its 0.98 quantile lies between 97 and 98
    assert kept_counts(documents, 0.98, 0) == ["1/2"]
    assert kept_counts(documents, 0.5, 0) == ["1/2"]  # 0.5 scores below the filler's median; 98.5 above
    assert kept_counts(documents, 0.0, 0) == ["2/2"]


def test_kept_counts_leave_out_of_the_filler_the_entries_a_pool_gave_a_statements_score():
    scores = torch.zeros(100)
    scores[38:45] = 5.0  # a statement at 40-43 whose pool (reach 2) spread its best score to two entries each side
    documents = [([scores[None]], [(40, 43)])]
    assert kept_counts(documents, 0.99, 0) == ["0/1"]  # its neighbours set the filler's tail at its own score
    assert kept_counts(documents, 0.99, 2) == ["1/1"]
    assert kept_counts(documents, 0.99, 1) == ["0/1"]  # one neighbour left each side is still 2 of 95 entries
