"""KServe's `ModelServer` around the same Paddle predictor (a peer for serving_peers.py).

Run by `benchmarks/serving_peers.py` with the Python of its own virtual
environment (`kserve` from PyPI; `--system-site-packages` shares the
installed paddlepaddle). Configured by environment variables, because
`kserve.model_server` parses `sys.argv` when it is imported:

    KSERVE_PEER_MODEL_DIR   the model directory (the same export our server serves)
    KSERVE_PEER_NAME        the model name in the OIP routes
    KSERVE_PEER_PORT        the HTTP port (gRPC off)

The model is what a KServe user writes for a custom predictor: a
`kserve.Model` whose `load()` creates the predictor and whose `predict()`
takes the OIP v2 `InferRequest`'s tensors by name, runs the predictor and
answers an `InferResponse` (binary outputs when the request asks for them).
The predictor is made by this repository's own `create_predictor` (CPU, one
math thread, glog off), so both servers run the identical Paddle config.
"""

import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import paddle.inference  # noqa: E402,F401  (before kserve installs its signal handlers)
from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer  # noqa: E402
from kserve.utils.numpy_codec import from_np_dtype  # noqa: E402
from kserve.utils.utils import generate_uuid  # noqa: E402

from serving.modeldir import load_model_dir  # noqa: E402
from serving.runtime import create_predictor, run_predictor  # noqa: E402


class PaddlePredictorModel(Model):
    """A Paddle Inference export behind KServe's OIP v2 data plane."""

    def __init__(self, name: str, model_dir: str) -> None:
        super().__init__(name)
        self.model_dir = model_dir
        self.predictor = None
        self.output_names: list[str] = []

    def load(self) -> bool:
        self.predictor = create_predictor(load_model_dir(self.model_dir), 1)
        self.output_names = list(self.predictor.get_output_names())
        self.ready = True
        return self.ready

    def predict(self, payload: InferRequest, headers=None, response_headers=None):
        feeds = {tensor.name: tensor.as_numpy() for tensor in payload.inputs}
        arrays = run_predictor(self.predictor, feeds)
        binary = payload.use_binary_outputs
        outputs = []
        for name, array in zip(self.output_names, arrays):
            output = InferOutput(name=name, shape=list(array.shape),
                                 datatype=from_np_dtype(array.dtype))
            output.set_data_from_numpy(array, binary_data=binary)
            outputs.append(output)
        return InferResponse(response_id=payload.id or generate_uuid(), model_name=self.name,
                             infer_outputs=outputs, use_binary_outputs=binary)


if __name__ == "__main__":
    model = PaddlePredictorModel(os.environ["KSERVE_PEER_NAME"],
                                 os.environ["KSERVE_PEER_MODEL_DIR"])
    model.load()
    ModelServer(http_port=int(os.environ["KSERVE_PEER_PORT"]), enable_grpc=False,
                enable_latency_logging=False, workers=1).start([model])
