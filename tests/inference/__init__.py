"""Tests of vfl/inference: batch prediction, online serving (HTTP included) and the ONNX export."""
