# -*- coding: utf-8 -*-
# Copyright: Telemetry-aware scheduling maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The collection's images from a registry of the user's, and the pull Secrets of its pods.

An image keeps its repository path, tag and digest and takes the registry in place of its own,
as Helm charts' global.imageRegistry does (quay.io/prometheus/node-exporter:v1.8.2 ->
registry.example.com/mirror/prometheus/node-exporter:v1.8.2). The roles' defaults apply it, so
an image the user names is used as given:

    node_exporter_image: "{{ 'quay.io/prometheus/node-exporter:v1.8.2' | intel.tas.image_from(tas_image_registry) }}"
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError


def _checked(image, what):
    if not isinstance(image, str) or not image:
        raise AnsibleFilterError("%s needs an image name, such as quay.io/prometheus/prometheus:v2.53.2: got %r"
                                 % (what, image))
    return image


def _without_registry(image):
    """The image's name after its registry: the first component is a registry only when it looks
    like a host (a dot, a port or localhost), as container runtimes read an image's name."""
    first, slash, rest = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return rest
    return image


def image_from(image, registry):
    """The image pulled from registry (host, port and path, no scheme), or as it is when registry is empty."""
    _checked(image, "image_from")
    if not registry:
        return image
    return "%s/%s" % (registry, _without_registry(image))


def image_tagged(image, tag):
    """The image with tag, unless it names a tag or a digest of its own (or tag is empty)."""
    _checked(image, "image_tagged")
    last = image.rsplit("/", 1)[-1]
    if not tag or "@" in image or ":" in last:
        return image
    return "%s:%s" % (image, tag)


def image_pull_secrets(names, made_secret, registry_username):
    """The imagePullSecrets of a pod spec: the Secrets named, and the one the collection makes
    (made_secret) when registry credentials are given, each once."""
    if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) and name for name in names):
        raise AnsibleFilterError("image_pull_secrets needs a list of Secret names: got %r" % (names,))
    wanted = list(names) + ([made_secret] if registry_username else [])
    return [{"name": name} for index, name in enumerate(wanted) if name not in wanted[:index]]


class FilterModule:
    def filters(self):
        return {"image_from": image_from, "image_tagged": image_tagged, "image_pull_secrets": image_pull_secrets}
