"""The default intent model shipped with the package (intent.onnx + card.json), so a fresh install routes."""
