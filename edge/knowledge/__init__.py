"""Venue knowledge: operator facts retrieved on the device and put into the prompt.

``models.knowledge_pack`` parses packs (the fleet agent checks bundles with it too); here live the
retrieval index (``index``), the question features (``text``), venue detection (``venue``), the
grounded prompt and the strict "ask staff" answer (``grounding``), and the per-app service with its
counters (``service``). The router takes the evidence as one more input; the pipeline grounds the
request a backend sees.
"""

from .grounding import Evidence, ground
from .index import KnowledgeIndex, Passage
from .service import KnowledgeBase

__all__ = ["Evidence", "KnowledgeBase", "KnowledgeIndex", "Passage", "ground"]
