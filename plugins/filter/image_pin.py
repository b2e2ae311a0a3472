# -*- coding: utf-8 -*-
# Copyright: (c) 2026, sparkfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter: sparkfleet.vllm.image_pin (documented in image_pin.yml)."""

from __future__ import annotations

import re

from ansible_collections.sparkfleet.vllm.plugins.plugin_utils._checks import fail

DIGEST = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")


def _name(ref):
    """An image reference without its tag or digest (a registry's :port is not a tag)."""
    ref = ref.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return ref[:len(ref) - len(last)] + last.split(":", 1)[0]


def _short(name):
    """Docker Hub's implied prefixes, as RepoDigests leave them out."""
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/", "index.docker.io/"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def image_ref(image, tag="latest"):
    """The reference to read on the head: the image as written, or NAME:tag for a placeholder digest."""
    image = (image or "").strip()
    if "@" in image and not DIGEST.match(image):
        return "%s:%s" % (_name(image), tag)
    return image


def image_pin(image, repo_digests, tag="latest"):
    """What to write into sparkfleet_image: {'pin': NAME@sha256:... or '', 'why': a sentence, 'ref': the reference
    to read on the head}."""
    if not isinstance(image, str) or not image.strip():
        fail("image_pin", "the input must be the image reference (sparkfleet_image), got %r" % (image,))
    if not isinstance(tag, str) or not tag.strip() or any(c.isspace() or c in "@/:" for c in tag):
        fail("image_pin", "tag must be a tag (prepare_image_tag, e.g. latest), got %r" % (tag,))
    if repo_digests is not None and (isinstance(repo_digests, (str, bytes, dict)) or not hasattr(repo_digests, "__iter__")):
        fail("image_pin", "repo_digests must be the list docker prints (RepoDigests), got %r" % (repo_digests,))
    image = image.strip()
    ref = image_ref(image, tag)
    if DIGEST.match(image):
        return {"pin": "", "ref": ref, "why": "sparkfleet_image is pinned by digest already (%s)" % image}
    name = _short(_name(ref))
    for digest in repo_digests or []:
        if isinstance(digest, str) and DIGEST.match(digest) and _short(_name(digest)) == name:
            return {"pin": "%s@%s" % (_name(ref), digest.split("@", 1)[1]), "ref": ref,
                    "why": "%s is %s on the head" % (ref, digest.split("@", 1)[1])}
    why = ("%s has no registry digest on the head (it was built or loaded there, not pulled from a registry), so "
           "sparkfleet_image stays %s; pull it from its registry on the head to have it pinned" % (ref, image))
    return {"pin": "", "ref": ref, "why": why}


class FilterModule:
    """Pinning the runtime image by digest (playbooks/prepare.yml)."""

    def filters(self):
        return {"image_pin": image_pin}
