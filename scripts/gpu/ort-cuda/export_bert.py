"""Writes BERT-base (transformers' BertModel(BertConfig()), seeded random weights, fp32) as ONNX
with dynamic batch and sequence: inputs input_ids and attention_mask [batch, sequence], outputs
last_hidden_state and pooler_output. Runs on the GPU machine (torch, transformers, onnx there).
usage: python3 export_bert.py OUT.onnx"""
import sys

import torch
from transformers import BertConfig, BertModel

torch.manual_seed(0)
cfg = BertConfig()


class Bert(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.m = BertModel(cfg).eval()

    def forward(self, input_ids, attention_mask):
        o = self.m(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        return o.last_hidden_state, o.pooler_output


out = sys.argv[1]
ids = torch.randint(0, cfg.vocab_size, (2, 16))
torch.onnx.export(
    Bert().eval(), (ids, torch.ones_like(ids)), out,
    input_names=["input_ids", "attention_mask"],
    output_names=["last_hidden_state", "pooler_output"],
    dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
                  "last_hidden_state": {0: "batch", 1: "sequence"}, "pooler_output": {0: "batch"}},
    opset_version=17, dynamo=False)
print("wrote", out)
