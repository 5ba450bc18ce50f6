"""``edge-deploy convert face --embedder MODEL.onnx`` on a real model: dlib's fp32 ONNX embedder (as the shared
``face_fp32_models`` export writes it) with a fixed random projection to 64-d and an L2 normalisation appended,
so that the descriptor size and the distance scale differ from dlib's. No mocks: the real pipeline, the real
evaluation set, onnxruntime."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

#: The user model's descriptor size.
USER_SIZE = 64


def make_user_embedder(dlib_onnx: Path, out: Path, size: int = USER_SIZE, seed: int = 0) -> Path:
    """dlib's embedder -> MatMul by a seeded Gaussian [128, size] -> LpNormalization (p=2): a 'user' model."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(dlib_onnx))
    graph = model.graph
    (old_out,) = graph.output
    projection = (np.random.default_rng(seed).standard_normal((128, size)) / np.sqrt(size)).astype(np.float32)
    graph.initializer.append(numpy_helper.from_array(projection, "user_projection"))
    graph.node.extend(
        [
            helper.make_node("MatMul", [old_out.name, "user_projection"], ["user_projected"]),
            helper.make_node("LpNormalization", ["user_projected"], ["embedding"], axis=1, p=2),
        ]
    )
    graph.output.remove(old_out)
    graph.output.append(helper.make_tensor_value_info("embedding", onnx.TensorProto.FLOAT, ["N", size]))
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return out


def make_nhwc_112_embedder(user_150: Path, out: Path) -> Path:
    """The 'user' model behind a front that takes [N, 112, 112, 3] chips normalised as (pixel - 127.5) / 127.5:
    undo the normalisation, NHWC -> NCHW, Resize (linear) to dlib's 150 x 150. Another chip size, layout and
    normalisation, each of which the conversion must get right for the model to see dlib's chip."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(user_150))
    graph = model.graph
    (old_in,) = graph.input
    for node in graph.node:
        node.input[:] = ["front_resized" if n == old_in.name else n for n in node.input]
    graph.initializer.extend(
        [numpy_helper.from_array(np.array(127.5, np.float32), "front_half"), numpy_helper.from_array(
            np.array([150, 150], np.int64), "front_sizes")]
    )  # fmt: skip
    front = [
        helper.make_node("Mul", ["face", "front_half"], ["front_scaled"]),
        helper.make_node("Add", ["front_scaled", "front_half"], ["front_pixels"]),
        helper.make_node("Transpose", ["front_pixels"], ["front_nchw"], perm=[0, 3, 1, 2]),
        helper.make_node(
            "Resize", ["front_nchw", "", "", "front_sizes"], ["front_resized"], axes=[2, 3], mode="linear"
        ),
    ]
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend(front + nodes)
    graph.input.remove(old_in)
    graph.input.append(helper.make_tensor_value_info("face", onnx.TensorProto.FLOAT, ["N", 112, 112, 3]))
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return out


@pytest.fixture(scope="module")
def user_build(face_fp32_models, tmp_path_factory) -> dict:
    """The user model converted once through the CLI (fp32, rpi4, --licence); MTCNN and the 5-point model are
    exported again into the output folder (the export half of ``convert face``, tens of seconds), dlib's
    ResNet is not."""
    from edge.face import models as face_models
    from edge_deploy.cli import main

    root = tmp_path_factory.mktemp("user-embedder")
    user = make_user_embedder(
        face_models.read_models_folder(face_fp32_models).model_path("embedder"), root / "my_embedder.onnx"
    )
    out = root / "face"
    args = ["convert", "face", "-t", "rpi4", "--precision", "fp32", "--embedder", str(user), "--licence",
            "CC0-1.0 (test)", "-o", str(out), "--json"]  # fmt: skip
    assert main(args) == 0
    return {"out": out, "user": user}


def test_models_json_records_the_user_model(user_build):
    from edge.digest import file_sha256

    data = json.loads((user_build["out"] / "models.json").read_text())
    rec = data["recognition"]
    assert rec["descriptor_size"] == USER_SIZE
    assert rec["chip_size"] == 150 and rec["layout"] == "nchw" and rec["batch"] == "dynamic"
    assert rec["threshold"] != 0.6 and 0 < rec["threshold"] < 2
    assert rec["calibration"]["pairs"] > 1000 and rec["calibration"]["pair_accuracy"] > 0.9
    (embedder,) = [m for m in data["models"] if m["role"] == "embedder"]
    source = embedder["source"]
    assert source["file"] == "my_embedder.onnx" and source["sha256"] == file_sha256(user_build["user"])
    assert source["licence"] == "CC0-1.0 (test)" and source["licence_given_by"] == "edge-deploy convert face --licence"
    report = json.loads((user_build["out"] / "report.json").read_text())
    assert report["passed"] and report["recognition"]["threshold"] == rec["threshold"]
    (check,) = [c for c in report["source_checks"] if c["model"].startswith("user embedder")]
    assert check["max_abs_diff"] <= 1e-4 and check["shape"][1] == USER_SIZE
    assert report["dlib_proof"]["ran"] is False and "user embedder" in report["dlib_proof"]["reason"]
    markdown = (user_build["out"] / "report.md").read_text()
    assert "Threshold **" in markdown and f"Source: `my_embedder.onnx` (sha256 `{source['sha256']}`)" in markdown


def test_recognition_with_the_calibrated_threshold_names_the_evaluation_faces(user_build):
    """Enrol every face of each photo's original, then name the faces of its augmented views (8 people)."""
    from converters.face.boxes import match_boxes
    from converters.face.facedata import make_eval_set
    from edge.face.gallery import Gallery
    from edge.face.models import open_face_pipeline, read_models_folder
    from edge.face.recognize import recognize_image

    out = user_build["out"]
    eval_set = make_eval_set(0)
    right = wrong = unknown = 0
    with open_face_pipeline(out, threads=2) as pipeline:
        assert pipeline.threshold == read_models_folder(out).threshold != 0.6
        assert pipeline.embedder.descriptor_size == USER_SIZE and pipeline.embedder.chip_size == 150
        gallery = Gallery(USER_SIZE)
        for image in eval_set.images:
            faces = pipeline.analyze(image.rgb) if image.name.endswith("/original") else []
            boxes = [f.detection.box for f in faces]
            for i, j, _ in match_boxes([f.box for f in image.faces], boxes):
                gallery.add(image.faces[i].identity, faces[j].descriptor)
        assert len(gallery) == 8
        for image in eval_set.images:
            if image.name.endswith("/original"):
                continue
            found = recognize_image(pipeline, gallery, image.rgb)  # at the pipeline's (calibrated) threshold
            for i, j, _ in match_boxes([f.box for f in image.faces], [tuple(f["box"]) for f in found]):
                name = found[j]["name"]
                right += name == image.faces[i].identity
                unknown += name is None
                wrong += name not in (None, image.faces[i].identity)
    assert wrong == 0 and right >= 0.9 * (right + unknown), (right, unknown, wrong)


def test_int8_is_gated_against_the_user_fp32_model_at_its_threshold(user_build, tmp_path):
    """The same static QDQ quantization and gate as dlib's embedder (48 calibration images, as the shared
    INT8 fixture), unfused, decisions taken at the calibrated threshold, which the INT8 folder keeps."""
    import onnx

    from converters.face.quantize import quantize_face_models
    from edge.face.models import read_models_folder
    from edge.profiles import Precision, load_profile

    fp32 = user_build["out"]
    build = quantize_face_models(fp32, tmp_path / "int8", load_profile("rpi4"), Precision.INT8, calibration_count=48)
    threshold = read_models_folder(fp32).recognition["threshold"]
    assert build.passed and read_models_folder(build.out_dir).recognition == read_models_folder(fp32).recognition
    e = build.embedder
    assert e["decisions"]["threshold"] == threshold and e["decisions"]["pairs"] > 1000
    assert e["cosine_mean"] > 0.999 and e["decisions"]["agreement"] >= 0.995
    graph = onnx.load(str(build.out_dir / build.onnx_files["embedder"]["file"])).graph
    ops = [n.op_type for n in graph.node]
    assert ops.count("QuantizeLinear") > 20 and ops.count("DequantizeLinear") > ops.count("QuantizeLinear")
    assert [o.name for o in graph.output] == ["descriptor"]


def test_another_chip_size_layout_and_normalisation(user_build, tmp_path):
    """A [N,112,112,3] model fed (pixel - 127.5) / 127.5: chips are cut at 112, the normalisation is put in the
    shipped graph, and the descriptors equal the user model's on the evaluation chips."""
    import onnx

    from edge.face.models import open_face_pipeline, read_models_folder
    from edge_deploy.cli import main

    user = make_nhwc_112_embedder(user_build["user"], tmp_path / "nhwc112.onnx")
    out = tmp_path / "face"
    args = ["convert", "face", "-t", "rpi4", "--precision", "fp32", "--embedder", str(user), "--chip-mean", "127.5",
            "--chip-std", "127.5", "-o", str(out)]  # fmt: skip
    assert main(args) == 0
    rec = read_models_folder(out).recognition
    assert (rec["chip_size"], rec["layout"], rec["mean"], rec["std"]) == (112, "nhwc", [127.5] * 3, [127.5] * 3)
    assert rec["descriptor_size"] == USER_SIZE and rec["calibration"]["pair_accuracy"] > 0.9
    assert rec["threshold"] != 0.6 and rec["calibration"]["pairs"] > 1000
    shipped = onnx.load(str(out / "face_embedder.onnx")).graph
    assert [n.op_type for n in shipped.node][:2] == ["Sub", "Mul"] and shipped.input[0].name == "chip"
    report = json.loads((out / "report.json").read_text())
    assert report["passed"]
    (check,) = [c for c in report["source_checks"] if c["model"].startswith("user embedder")]
    assert check["max_abs_diff"] <= 1e-4
    with open_face_pipeline(out) as pipeline:
        assert (pipeline.chip_size, pipeline.embedder.chip_size) == (112, 112)
        assert pipeline.threshold == rec["threshold"]


def test_face_enroll_and_recognize_commands_use_the_folder_threshold(user_build, tmp_path, capsys):
    """``edge-deploy face enroll`` writes a 64-d gallery; ``face recognize`` without --threshold decides at the
    calibrated one (its JSON distances are on the user model's scale)."""
    import cv2

    from converters.face.facedata import make_eval_set
    from edge.face.models import read_models_folder
    from edge_deploy.cli import main

    images = {im.name: im for im in make_eval_set(0).images}
    people = tmp_path / "people"
    for name in ("astronaut", "tom_hanks"):
        (people / name).mkdir(parents=True)
        cv2.imwrite(str(people / name / "original.png"), images[f"{name}/original"].rgb[:, :, ::-1])
    probe = tmp_path / "probe.png"
    cv2.imwrite(str(probe), images["astronaut/aug1"].rgb[:, :, ::-1])
    out, gallery = user_build["out"], tmp_path / "gallery.npz"
    assert main(["face", "enroll", str(out), str(people), "-o", str(gallery), "--json"]) == 0
    capsys.readouterr()
    assert main(["face", "recognize", str(out), str(probe), "--gallery", str(gallery), "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    (face,) = result["faces"]
    assert face["name"] == "astronaut" and face["distance"] <= read_models_folder(out).threshold
    assert main(["face", "recognize", str(out), str(probe), "-g", str(gallery), "--threshold", "0.01", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["faces"][0]["name"] is None


def test_the_folder_is_bundled_with_the_daemon_and_its_golden_set(user_build, tmp_path, capsys):
    """``edge-deploy build --model FOLDER`` on the user-embedder folder: not converted again; the bundle carries
    the folder's files as they are (models.json with the calibrated threshold), the daemon's files, and a golden
    set from the user's model that the device's acceptance check reproduces; the manifest records the user's
    licence. Refused: --licence (models.json has it), another target, a file changed after the conversion."""
    import shutil

    from converters.package.face_folder import read_face_folder
    from converters.package.golden import GOLDEN_CHIPS
    from edge.bundle import verify_bundle
    from edge.errors import InputError
    from edge.face.models import open_face_pipeline, read_models_folder
    from edge.update.golden import check_golden
    from edge_deploy.cli import main

    out, dist = user_build["out"], tmp_path / "dist"
    assert main(["build", "--model", str(out), "-o", str(dist), "--no-wheels", "--no-archive", "-q", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    bundle = dist / "rpi4-face-face"
    assert Path(record["folder"]) == bundle
    verify_bundle(bundle)
    (model,) = json.loads((bundle / "manifest.json").read_text())["models"]
    assert model["kind"] == "face" and model["precision"] == "fp32" and model["folder"] == "models/face"
    assert model["from"] == str(out) and model["metrics"]["passed"] is True
    assert "CC0-1.0 (test)" in {s["licence"] for s in model["sources"]}
    faces = bundle / "models" / "face"
    assert (faces / "models.json").read_bytes() == (out / "models.json").read_bytes()
    assert (bundle / "config" / "edge-deploy.example.toml").is_file()  # the daemon runs face folders
    golden = check_golden(bundle, threads=1, max_latency_ms=1e9, bench_runs=1)
    assert golden.count == GOLDEN_CHIPS and golden.worst_cosine > 0.9999
    with open_face_pipeline(faces) as pipeline:
        assert (
            pipeline.threshold == read_models_folder(out).threshold and pipeline.embedder.descriptor_size == USER_SIZE
        )

    assert main(["build", "--model", str(out), "-o", str(dist), "--no-wheels", "--licence", "MIT"]) == 3
    assert "its models.json records every model's licence" in capsys.readouterr().err
    assert main(["build", "--model", str(out), "-t", "rpi5", "-o", str(dist), "--no-wheels"]) == 3
    assert f"--target rpi5: {out} was converted and gated for rpi4" in capsys.readouterr().err
    changed = tmp_path / "changed"
    shutil.copytree(out, changed)
    (entry,) = [m for m in json.loads((out / "models.json").read_text())["models"] if m["role"] == "embedder"]
    embedder = changed / entry["file"]
    embedder.write_bytes(embedder.read_bytes()[:-1] + b"\0")
    with pytest.raises(InputError, match=rf"'{entry['file']}': sha256 .* but models.json says"):
        read_face_folder(changed)


@pytest.mark.arm
def test_the_user_embedder_on_an_emulated_pi_5_equals_the_host(user_build, tmp_path):
    """The user's model through the device pipeline in the arm64 guest (``qemu-aarch64 -cpu cortex-a76``) gives
    the host's boxes and descriptors, and every probe pair's decision at the folder's calibrated threshold (not
    dlib's 0.6: a 64-d L2-normalised descriptor has another distance scale)."""
    from converters.arm.face import FP32_DESCRIPTOR_TOLERANCE, check_face_models

    comparison = check_face_models(user_build["out"], "cortex-a76", tmp_path)
    assert comparison.problems(FP32_DESCRIPTOR_TOLERANCE) == []
    assert (comparison.faces_guest, comparison.pairs, comparison.decisions_agree) == (5, 10, 10)
