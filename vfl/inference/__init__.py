"""Using a trained model: batch prediction on new rows, per-party export (ONNX), and online scoring."""
