"""Graph rewrites that undo an exporter's decomposition of one PyTorch kernel into several nodes.

PyTorch runs some activations as one fused kernel forward and one backward; exporters targeting
an opset without that operator spell them out in primitive nodes, which would cost several
kernels each way. Each rule here recognises one such spelling and puts the single operator back:

* ``Mul(x, Sigmoid(x))`` (either operand order, the ``Sigmoid`` used only by that ``Mul``)
  -> ``Swish`` (ONNX opset 24's name; alpha 1), which runs as ``F.silu``: ``nn.SiLU`` exports as
  this pair before opset 24.

Not rewritten: attention. Exported attention (``MatMul``, scale, mask ``Add``, ``Softmax``,
``Dropout``, ``MatMul``) is costed as those unfused ops, which is what a runtime executing the
graph as written does; PyTorch's fused SDPA kernels differ (see the ONNX parity table in docs/models.md).
"""

from __future__ import annotations


def fuse(nodes: list) -> list:
    """A new node list with the rewrites above applied (the input list is not changed)."""
    from onnx import helper

    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    consumers: dict[str, int] = {}
    for n in nodes:
        for name in n.input:
            consumers[name] = consumers.get(name, 0) + 1
    drop: set[int] = set()
    replace: dict[int, object] = {}
    for i, n in enumerate(nodes):
        if n.op_type != "Mul" or n.domain not in ("", "ai.onnx") or len(n.input) != 2:
            continue
        for x, s in (n.input, n.input[::-1]):
            j = producer.get(s)
            if j is None or j in drop:
                continue
            sig = nodes[j]
            if sig.op_type == "Sigmoid" and sig.input[0] == x and consumers.get(s) == 1:
                drop.add(j)
                replace[i] = helper.make_node("Swish", [x], list(n.output), name=n.name or sig.name)
                break
    return [replace.get(i, n) for i, n in enumerate(nodes) if i not in drop]
