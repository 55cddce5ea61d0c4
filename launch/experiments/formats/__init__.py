"""Files Shoal writes for other tools to read: a trained policy as an ONNX model
(``onnx_model``, for ``shoal export --format onnx``) and a policy's episodes as a Minari dataset
(``minari_dataset``, for ``shoal record``)."""
