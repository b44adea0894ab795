"""PATCH bodies: JSON merge patch, strategic merge patch, JSON patch, server-side apply.

- ``application/merge-patch+json``: RFC 7386 (null deletes a key, lists replace).
- ``application/strategic-merge-patch+json`` and ``application/apply-patch+yaml``:
  merge as RFC 7386, except lists Kubernetes merges by key (``patchMergeKey``:
  containers/initContainers/volumes/env by ``name``, volumeMounts by ``mountPath``,
  ports by ``containerPort``, conditions by ``type``, ownerReferences by ``uid``),
  which are merged element by element. ``$patch`` directives are not supported.
- ``application/json-patch+json``: RFC 6902 via ``jsonpatch``.
Raises :class:`~metallo.labs.kubernetes.errors.ApiError` (415 or 422) on a bad body.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
from ruamel.yaml import YAML

from metallo.labs.kubernetes.errors import ApiError, bad_request, unsupported_media

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
PATCH_TYPES = (MERGE, STRATEGIC, JSON_PATCH, APPLY)

MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "volumes": "name", "env": "name", "volumeMounts": "mountPath", "ports": "containerPort",
    "conditions": "type", "ownerReferences": "uid", "imagePullSecrets": "name",
    "tolerations": "key", "hostAliases": "ip",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (returns a new value)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge(target: Any, patch: Any, key: str | None = None) -> Any:
    """Merge as Kubernetes' strategic merge patch does for the keyed lists above."""
    if isinstance(patch, dict):
        out = dict(target) if isinstance(target, dict) else {}
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = strategic_merge(out.get(k), v, k)
        return out
    merge_key = MERGE_KEYS.get(key or "")
    if isinstance(patch, list) and merge_key and isinstance(target, list):
        out_list = [copy.deepcopy(x) for x in target]
        index = {x.get(merge_key): i for i, x in enumerate(out_list) if isinstance(x, dict)}
        for item in patch:
            if isinstance(item, dict) and item.get(merge_key) in index:
                i = index[item[merge_key]]
                out_list[i] = strategic_merge(out_list[i], item)
            else:
                out_list.append(copy.deepcopy(item))
        return out_list
    return copy.deepcopy(patch)


def decode_body(raw: bytes, content_type: str) -> Any:
    """The PATCH body as data: YAML (a JSON superset) for apply, JSON otherwise."""
    try:
        if content_type == APPLY:
            return YAML(typ="safe").load(raw.decode("utf-8"))
        return json.loads(raw or b"null")
    except Exception as e:  # noqa: BLE001 - any decoding failure is the client's
        raise bad_request(f"the body of the request could not be decoded: {e}") from None


def apply_patch(current: dict, content_type: str, body: Any) -> dict:
    """The object after the patch; ``current`` is not modified."""
    if content_type == MERGE:
        if not isinstance(body, dict):
            raise bad_request("a merge patch must be a JSON object")
        return merge_patch(current, body)
    if content_type in (STRATEGIC, APPLY):
        if not isinstance(body, dict):
            raise bad_request("a strategic merge patch must be a JSON object")
        return strategic_merge(current, body)
    if content_type == JSON_PATCH:
        if not isinstance(body, list):
            raise bad_request("a JSON patch must be a JSON array")
        try:
            return jsonpatch.JsonPatch(body).apply(copy.deepcopy(current))
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
            raise ApiError(422, "Invalid", f"the server rejected our request due to an error "
                           f"in our request: {e}") from None
    raise unsupported_media(content_type)
