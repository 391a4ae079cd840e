"""Which vectors an import keeps, and which model embeds the rest: never another model silently.

An export's header names the model of its vectors: the one its table records, or, for a
memory-lancedb-pro table (which records none), the one openclaw.json sets up on that directory
(``from: openclaw.json``). The target embeds with what ``serve`` would use on its own directory,
openclaw.json included (``create_embedder``). Then:

- the same model and dimension: the exported vectors are kept (a row without a usable one is embedded);
- no model recorded but the target's dimension: kept too, as ``serve`` assumes of a table recording none;
- ``keep``: they are kept as told, if their dimension is the target's;
- ``reembed``: every text is embedded with the target's model;
- otherwise, when the export's model is another (or unknown, of another size), nothing is written: the
  error names both and the choices. An export without vectors from an unknown model is embedded with
  the target's, the only model it can get.

Moving a table to a directory OpenClaw will open: point the plugin's dbPath there first, so the target
embeds (and keeps vectors) as the plugin does.
"""

from __future__ import annotations

from typing import Any, Literal

from app.errors import InvalidInput
from app.memory.embeddings.base import Embedder

Mode = Literal["auto", "keep", "reembed"]
MODES: tuple[Mode, ...] = ("auto", "keep", "reembed")
_IDENTITY_KEYS = ("provider", "model", "dimension")


class ModelChoiceNeeded(InvalidInput):
    """The export's vectors are not the target's model's (or record none): keep them or re-embed, explicitly."""

    code = "import_model_differs"


def exported_identity(header: dict[str, Any]) -> dict[str, str] | None:
    """Provider, model and dimension of the export's vectors, when its header names them."""
    recorded = header.get("embedding")
    if not isinstance(recorded, dict) or not all(key in recorded for key in _IDENTITY_KEYS):
        return None
    return {key: str(recorded[key]) for key in _IDENTITY_KEYS}


def describe(identity: dict[str, str]) -> str:
    return f"{identity['provider']}/{identity['model']} ({identity['dimension']}-d)"


def keeps_vectors(header: dict[str, Any], embedder: Embedder, mode: Mode = "auto") -> bool:
    """Whether the import keeps the exported vectors (the module docstring's rules).

    Raises:
        ModelChoiceNeeded: they are another model's or unrecorded and ``mode`` does not say what to do, or
            ``keep`` was asked for vectors the export lacks or of another dimension.
    """
    exported = exported_identity(header)
    has_vectors = bool(header.get("vectors"))
    target = describe(embedder.identity)
    if mode == "reembed":
        return False
    if mode == "keep":
        if not has_vectors:
            raise ModelChoiceNeeded("the export holds no vectors to keep (it was made without --vectors)")
        if str(header.get("dimension")) != str(embedder.dimension):
            raise ModelChoiceNeeded(
                f"the export's vectors are {header.get('dimension')}-d, but the target embeds with {target}: give "
                "the target the export's embedding settings (openclaw.json's dbPath, or --provider/--model/"
                "--dimensions), or pass --reembed")
        return True
    if exported == embedder.identity:
        return has_vectors
    if exported is None and (not has_vectors or str(header.get("dimension")) == str(embedder.dimension)):
        return has_vectors
    source = describe(exported) if exported is not None else (
        f"a model the export does not record ({header.get('dimension')}-d)")
    if isinstance(header.get("embedding"), dict) and header["embedding"].get("from"):
        source += f", named by {header['embedding']['from']}"
    what = "vectors come" if has_vectors else "texts were embedded"
    keep = "--keep-vectors to keep them as that model's, " if has_vectors and exported is not None and (
        exported["dimension"] == str(embedder.dimension)) else ""
    raise ModelChoiceNeeded(
        f"the export's {what} from {source}, but the target would embed with {target}: pass {keep}--reembed to "
        "embed every text with the target's model, or give the target the export's embedding settings first "
        "(openclaw.json's dbPath, or --provider/--model/--dimensions)")
