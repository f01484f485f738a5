"""Random edits of the files locret loads besides documents: `.locret` headers, heads configs and GGUF headers.

Fuzzed with hypothesis, derandomized so every run tries the same cases: each edited file is either refused with one
LocretError line (never another exception) or loads, and each test's docstring says which loads are harmless by
construction, and asserts that every load is one of them.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.hostile_files import locret_header, needs_gguf, saved_depot, signed, with_header
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from locret_cli.api.context_header import DIGEST
from locret_cli.core.transformers_internals import has_activation
from locret_cli.errors import LocretError
from locret_cli.models import gguf
from locret_cli.models.embedded import EMBEDDED_DIR
from locret_cli.models.heads_files import load_heads

FUZZ = dict(derandomize=True, database=None, deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
CHARACTERS = st.sampled_from(list('{}[]",:.-+0123456789eE afilnrstu\\'))


@pytest.fixture(scope="module")
def saved(embedded_session, tmp_path_factory) -> Path:
    return saved_depot(embedded_session, tmp_path_factory.mktemp("saved"))


def one_character_edit(text: str, data, where: st.SearchStrategy[int]) -> str:
    """`text` with one character, at a position `where` draws, replaced, inserted before or deleted."""
    at, how = data.draw(where, label="at"), data.draw(st.sampled_from(["replace", "insert", "delete"]), label="how")
    character = data.draw(CHARACTERS, label="character")
    if how == "delete":
        return text[:at] + text[at + 1:]
    return text[:at] + character + text[at + (how == "replace"):]


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True)


def refused_in_one_line(load) -> bool:
    """Whether `load()` raised LocretError (its message one line); any other exception fails the test."""
    try:
        load()
    except LocretError as exc:
        assert "\n" not in str(exc), str(exc)
        return True
    return False


@settings(max_examples=150, **FUZZ)
@given(data=st.data())
def test_an_edited_header_loads_only_if_it_means_the_same(embedded_session, saved, tmp_path, data):
    """Harmless: an edit after which the header parses to the same JSON value (compared as canonical JSON, so 1 and
    1.0 differ), such as a space between tokens or another spelling of the same number. The digest covers exactly
    that value, so every other edit (a digit of a setting, a letter of a name, a brace) must be refused."""
    text = locret_header(saved)
    edited = one_character_edit(text, data, st.integers(0, len(text) - 1))
    path = with_header(saved, tmp_path / "edited.locret", edited)
    if not refused_in_one_line(lambda: embedded_session.open(str(path))):
        assert canonical(json.loads(edited)) == canonical(json.loads(text)), edited


DELETE = object()  # `replaced`'s new value that deletes the old one
OTHER_TYPES = ["7", 7, 7.5, True, [], [7], {}, {"x": 7}]  # a value of each JSON type but null


def places(value, at: tuple = ()) -> list[tuple]:
    """The path of every value inside `value` (keys of objects, indices of lists), the top one excepted."""
    inner = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return [p for key, element in inner for p in [(*at, key), *places(element, (*at, key))]]


def replaced(value, at: tuple, new):
    """`value` with the value at path `at` replaced by `new` (deleted where `new` is DELETE)."""
    if not at:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    if len(at) == 1 and new is DELETE:
        del copy[at[0]]
    else:
        copy[at[0]] = replaced(value[at[0]], at[1:], new)
    return copy


def value_at(value, at: tuple):
    for key in at:
        value = value[key]
    return value


@settings(max_examples=120, **FUZZ)
@given(data=st.data())
def test_a_header_signed_again_with_a_field_removed_added_or_of_another_type_is_refused(embedded_session, saved,
                                                                                      tmp_path, data):
    """With the digest recomputed (a crafted file, or one we wrote with a bug), the fields are checked on their own:
    an object that loses a field or gains one, or a value replaced by one of another JSON type, must be refused.
    Left out as harmless: fields that are null (the pages of a text document, which may be any count), a whole
    number where a fraction was (a number may be either), and the digest itself, which `signed` writes again."""
    header = json.loads(locret_header(saved))
    fields = [p for p in places(header) if p != (DIGEST,)]
    how = data.draw(st.sampled_from(["remove", "add", "retype"]), label="how")
    if how == "add":
        objects = [()] + [p for p in fields if isinstance(value_at(header, p), dict)]
        at = data.draw(st.sampled_from(objects), label="object")
        edited = replaced(header, at, {**value_at(header, at), "extra": 7})
    else:
        removable = [p for p in fields if isinstance(value_at(header, p[:-1]), dict)]
        at = data.draw(st.sampled_from(removable if how == "remove" else
                                       [p for p in fields if value_at(header, p) is not None]), label="field")
        old = value_at(header, at)
        others = [v for v in OTHER_TYPES
                  if type(v) is not type(old) and not (isinstance(old, float) and type(v) is int)]
        edited = replaced(header, at, DELETE if how == "remove" else data.draw(st.sampled_from(others), label="new"))
    path = with_header(saved, tmp_path / "signed.locret", signed(edited))
    assert refused_in_one_line(lambda: embedded_session.open(str(path))), (how, at)


@pytest.fixture(scope="module")
def original_heads(embedded_session):
    return embedded_session.heads.state_dict()


DECISIVE = ("format", "version", "model_shape", "hidden")


@settings(max_examples=120, **FUZZ)
@given(data=st.data())
def test_an_edited_heads_config_loads_only_as_the_same_heads(embedded_session, original_heads, tmp_path, data):
    """Harmless: an edit after which the loaded heads are the original ones (every tensor equal) and the config
    still agrees with the original in every field that decides them (format, version, model shape, hidden size),
    with an activation transformers has, which the heads then use; and, where the edited config still records the
    identity of the model, its shape is the original's. Fields loading never reads (model, data, training) may
    differ, and so may the identity's sampled weights while they still match the model (a cosine above 0.95), or
    the identity as a whole when its key is renamed (heads without one are accepted)."""
    folder = tmp_path / "heads"
    if not folder.is_dir():
        shutil.copytree(EMBEDDED_DIR / "heads", folder)
    text = (EMBEDDED_DIR / "heads" / "heads.json").read_text()
    identity = text.index('"model_identity"')
    where = st.one_of(st.integers(0, identity), st.integers(identity, identity + 200), st.integers(0, len(text) - 1))
    edited = one_character_edit(text, data, where)
    (folder / "heads.json").write_text(edited)
    loaded = []
    if refused_in_one_line(lambda: loaded.append(load_heads(folder, embedded_session.loaded.model))):
        return
    heads, config, before = loaded[0], json.loads(edited), json.loads(text)
    assert all(torch.equal(t, original_heads[name].to(t.dtype)) for name, t in heads.state_dict().items())
    assert all(canonical(config[key]) == canonical(before[key]) for key in DECISIVE), edited
    assert has_activation(config["activation"]) and heads.activation == config["activation"]
    if "model_identity" in config:
        assert config["model_identity"]["shape"] == before["model_identity"]["shape"]


@pytest.fixture(scope="module")
def small_gguf(tmp_path_factory) -> tuple[bytes, int]:
    """(bytes, where its tensors' data begins) of a GGUF file with values of each kind locret parses (scalars,
    strings, arrays of both) and two tensors."""
    import gguf as package

    path = tmp_path_factory.mktemp("gguf") / "small.gguf"
    writer = package.GGUFWriter(str(path), "llama")
    for key, value in (("block_count", 2), ("attention.head_count", 4), ("attention.head_count_kv", 2),
                       ("embedding_length", 64)):
        writer.add_uint32(f"llama.{key}", value)
    writer.add_string("general.name", "small")
    writer.add_token_list(["a", "bc", "<s>"])
    writer.add_token_scores([0.5, -1.0, 0.0])
    writer.add_tensor("token_embd.weight", np.zeros((3, 8), dtype=np.float32))
    writer.add_tensor("output_norm.weight", np.ones(8, dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes(), package.GGUFReader(str(path)).data_offset


BOUNDARIES = [0, 1, 8, 255, 1 << 31, (1 << 32) - 1, 1 << 62, (1 << 64) - 1]


@needs_gguf
@settings(max_examples=300, **FUZZ)
@given(data=st.data())
def test_an_edited_gguf_header_is_refused_in_one_line_or_read_whole_by_the_gguf_reader(small_gguf, tmp_path, data):
    """Edits: bytes of the header overwritten, a length or count overwritten with a boundary value, or the file cut
    short. Reading the architecture, the shape and the whole layout raises only LocretError. Harmless, for a file
    whose layout is accepted (what then goes to transformers): gguf's reader, which transformers loads it with,
    reads it whole without an error, finds every tensor's data inside the file and the same architecture."""
    from gguf import GGUFReader

    original, data_start = small_gguf
    damaged = bytearray(original)
    how = data.draw(st.sampled_from(["bytes", "number", "cut"]), label="how")
    if how == "bytes":
        for _ in range(data.draw(st.integers(1, 4), label="bytes")):
            damaged[data.draw(st.integers(0, data_start - 1))] = data.draw(st.integers(0, 255))
    elif how == "number":
        at = data.draw(st.integers(0, data_start - 8), label="at")
        damaged[at:at + 8] = struct.pack("<Q", data.draw(st.sampled_from(BOUNDARIES), label="value"))
    else:
        damaged = damaged[:data.draw(st.integers(0, len(damaged) - 1), label="cut at")]
    path = tmp_path / "edited.gguf"
    path.unlink(missing_ok=True)  # a new file each time: the last one's reader may still map the old one
    path.write_bytes(bytes(damaged))
    architecture = []
    refused_in_one_line(lambda: architecture.append(gguf.architecture(path)))
    refused_in_one_line(lambda: gguf.shape(path))
    if refused_in_one_line(lambda: gguf.check_layout(path)):
        return
    reader = GGUFReader(str(path))
    assert all(t.data_offset + t.n_bytes <= len(damaged) for t in reader.tensors)
    if architecture:
        field = reader.get_field("general.architecture")
        assert bytes(field.parts[field.data[0]]).decode() == architecture[0]
