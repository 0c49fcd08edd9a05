"""Classifiers by name: the one the pipeline calls, and the versions a channel stamps."""

from __future__ import annotations

import re

from django.utils.module_loading import import_string

from automation.classifiers.base import CLASSIFIERS, VERSIONS, Classifier, ClassifierUnavailable
from automation.conf import setting

# A learned model named by its version reads with that model (LearnedClassifier, pinned).
LEARNED_VERSION = re.compile(r"learned-[0-9a-f]{12}")


def get_classifier(name: str) -> Classifier:
    if LEARNED_VERSION.fullmatch(name):
        pinned: Classifier = import_string(CLASSIFIERS["learned"])(pinned=name)
        return pinned
    path = CLASSIFIERS.get(name)
    if path is None:
        raise ClassifierUnavailable(f"no classifier named {name!r} is installed")
    classifier: Classifier = import_string(path)()
    return classifier


def classifier_versions(name: str) -> tuple[str, str]:
    """(classifier version, prompt version) to stamp on a channel that uses this classifier.

    A model-backed classifier knows both (its model, its prompt file); the others keep their
    fixed version and the deployment's configured prompt version.
    """
    if name in VERSIONS:
        return VERSIONS[name], str(setting("PROMPT_VERSION"))
    classifier = get_classifier(name)
    return str(getattr(classifier, "version", name)), str(
        getattr(classifier, "prompt_version", setting("PROMPT_VERSION"))
    )


def classifier_exists(name: str) -> bool:
    """An installed classifier, or a stored learned model named by its version."""
    if LEARNED_VERSION.fullmatch(name):
        from automation.classifiers.models import ClassifierModel

        return ClassifierModel.objects.filter(version=name).exists()
    return name in CLASSIFIERS
