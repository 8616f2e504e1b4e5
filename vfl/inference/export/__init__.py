"""Export: a party's trained model with its frozen transforms as ONNX, for a serving stack without this project."""
