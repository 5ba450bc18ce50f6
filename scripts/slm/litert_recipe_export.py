"""``litert_export.py`` with a quantization recipe of our own rules (a benchmark's tool, not ``convert slm``'s).

Runs **inside .venv-litert-torch**, started by ``benchmarks/slm_litert_recipes.py`` as
``python scripts/slm/litert_recipe_export.py RECIPE EXPORT_ARGS...``. litert-torch 0.10.0's own layer recipes
(``GenerativeQuantRecipe(attention=..., feedforward=..., embedding=...)``) match op names that its SmolLM2
export no longer writes (``transformer_block/...`` against ``TransformerBlock_0/...``; the tied head's
``StatefulPartitionedCall``), so every op falls to the default rule. Here the ai-edge-quantizer recipe is
written directly: rules by op-name regex, later rules overriding earlier ones, all dynamic range
(int8 activations quantized per token at run time, as XNNPACK's integer kernels need).
"""

from __future__ import annotations

import sys

import litert_export

FEED_FORWARD = r".*GatedFeedForward_ff.*"

#: recipe -> rules (op-name regex, weight bits, granularity), in order; "none" quantizes nothing.
RECIPES: dict[str, list[tuple[str, int, str]]] = {
    "none": [],
    "int8-all": [(".*", 8, "CHANNELWISE")],
    "int4-mlp": [(".*", 8, "CHANNELWISE"), (FEED_FORWARD, 4, "BLOCKWISE_32")],
    "int4-all": [(".*", 4, "BLOCKWISE_32")],
}


def ai_edge_recipe(rules: list[tuple[str, int, str]]):
    """The ai-edge-quantizer recipe of ``rules``: symmetric weights, integer compute (dynamic range)."""
    from ai_edge_quantizer import algorithm_manager, qtyping, recipe_manager

    manager = recipe_manager.RecipeManager()
    for regex, bits, granularity in rules:
        weights = qtyping.TensorQuantizationConfig(
            num_bits=bits,
            symmetric=True,
            granularity=getattr(qtyping.QuantGranularity, granularity),
            dtype=qtyping.TensorDataType.INT,
        )
        manager.add_quantization_config(
            regex=regex,
            operation_name=qtyping.TFLOperationName.ALL_SUPPORTED,
            op_config=qtyping.OpQuantizationConfig(
                weight_tensor_config=weights,
                compute_precision=qtyping.ComputePrecision.INTEGER,
                explicit_dequantize=False,
            ),
            algorithm_key=algorithm_manager.AlgorithmName.MIN_MAX_UNIFORM_QUANT,
        )
    return manager.get_quantization_recipe()


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in RECIPES:
        raise SystemExit(f"usage: litert_recipe_export.py {{{','.join(RECIPES)}}} EXPORT_ARGS...")
    rules, export_args = RECIPES[argv[0]], argv[1:]
    if rules:
        litert_export.alias_tflite_schema()
        import litert_torch._convert.litert_converter as lowering
        from litert_torch.generative.quantize import quant_recipes
        from litert_torch.generative.utilities import converter

        # any recipe, so that the converter quantizes; its translation is replaced by ours
        converter.get_quant_recipe_from_flag = lambda quantize, config: quant_recipes.full_dynamic_recipe(mcfg=config)
        lowering.translate_recipe.translate_to_ai_edge_recipe = lambda _recipe: ai_edge_recipe(rules)
    return litert_export.main(export_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
