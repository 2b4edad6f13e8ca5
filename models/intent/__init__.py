"""The request intent classifier (simple vs complex).

Kept import-free on purpose: the gateway imports ``models.intent.runtime`` (numpy + onnxruntime only),
while ``models.intent.train`` pulls in scikit-learn and is needed only on an operator's machine.
"""
