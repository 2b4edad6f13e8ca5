"""The default intent model shipped with the package (intent.onnx + card.json, and the encoder stage's encoder.onnx
+ encoder_vocab.json), so a fresh install routes."""
