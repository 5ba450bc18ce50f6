"""Host side of the face models: dlib's ResNet-29 embedder, its 5-point shape predictor, MTCNN.

Sources, one module each: ``dlib_reader`` (dlib's serialization), ``dlib_resnet`` (embedder in torch ->
ONNX), ``dlib_shape`` (shape predictor -> arrays), ``mtcnn`` (facenet-pytorch weights -> ONNX). Then
``build`` (export and check the fp32 folder), ``calibration`` (INT8 calibration inputs), ``quantize`` (the
quantized folder per target and its gate), ``quant_eval`` (quantized vs fp32 on the evaluation set),
``agreement`` (our pipeline vs face_recognition's ``reference``), ``report``; ``facedata`` holds the photos.
"""
