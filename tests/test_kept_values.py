"""kept_values finds an answer's value among a read's kept entries, and reads a saved read's kept map."""

from __future__ import annotations

import torch
from safetensors.torch import save_file

from research.smollm2.kept_values import kept_share, read_kept


def test_a_value_counts_where_every_token_of_one_occurrence_is_kept():
    ids = torch.tensor([7, 1, 2, 9, 1, 2, 5])
    kept = torch.zeros(4, 7, dtype=torch.bool)
    kept[0, [1, 2]] = True  # the first occurrence whole
    kept[1, [4, 5]] = True  # the second whole
    kept[2, [1, 5]] = True  # half of each: not kept
    assert kept_share(ids, kept, [1, 2]) == 0.25  # the best single occurrence: one row of four
    kept[3, [4, 5]] = True
    assert kept_share(ids, kept, [1, 2]) == 0.5
    assert kept_share(ids, kept, [3]) == 0.0  # never in the document
    assert kept_share(ids, kept, []) == 0.0


def test_a_saved_reads_origins_become_one_row_per_layer_and_kv_head(tmp_path):
    path = tmp_path / "read.locret"
    save_file({"document.ids": torch.tensor([4, 5, 6, 7]),
               "layers.0.origins": torch.tensor([[[0, 2], [1, -1]]]),  # (1, kv_heads 2, kept 2); -1: not a token
               "layers.1.origins": torch.tensor([[[3, 3], [2, 0]]])}, str(path))
    ids, kept = read_kept(path)
    assert ids.tolist() == [4, 5, 6, 7]
    assert kept.tolist() == [[True, False, True, False], [False, True, False, False],
                             [False, False, False, True], [True, False, True, False]]
