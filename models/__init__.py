"""Model lifecycle: the intent classifier, and (in subpackages) the signed model store and fleet updates."""
