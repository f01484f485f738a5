"""Each heads recipe installs the settings the package ships with those heads, and trains them as the shipped heads
were trained, so running it again changes nothing a user gets but the weights' last bits."""

from __future__ import annotations

import json

import pytest

from locret_cli.models.heads_files import HEADS_CONFIG
from locret_cli.models.shipped import DEFAULTS_FILE, HEADS_ROOT
from recipes.gemma3 import build_heads as gemma3_heads
from recipes.smollm2 import build_heads as smollm2_heads


@pytest.mark.parametrize("recipe", [smollm2_heads, gemma3_heads], ids=lambda r: r.NAME)
def test_a_recipe_records_the_settings_that_ship_with_its_heads(recipe):
    shipped = json.loads((HEADS_ROOT / recipe.NAME / DEFAULTS_FILE).read_text())
    assert recipe.DEFAULTS == shipped


@pytest.mark.parametrize("recipe", [smollm2_heads, gemma3_heads], ids=lambda r: r.NAME)
def test_a_recipe_trains_with_the_keep_weight_its_shipped_heads_record(recipe):
    training = json.loads((HEADS_ROOT / recipe.NAME / HEADS_CONFIG).read_text())["training"]
    assert recipe.KEEP_WEIGHT == training["keep_weight"]


@pytest.mark.parametrize("size", ["0.5b", "1.5b"])
def test_the_qwen_recipe_records_the_settings_that_ship_with_each_models_heads(size):
    from recipes.qwen2_5_coder import build_heads as qwen_heads

    shipped = json.loads((HEADS_ROOT / f"qwen2.5-coder-{size}-instruct" / DEFAULTS_FILE).read_text())
    assert qwen_heads.DEFAULTS[size] == shipped
