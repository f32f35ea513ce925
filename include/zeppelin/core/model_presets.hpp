// zeppelin/core/model_presets.hpp
// The models of the specs. Where a paper names a size but not a shape, the shape of the
// public model of that size is used and the choice is stated. nvcc-safe.
#pragma once

#include <zeppelin/core/model.hpp>

#include <string>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace models {
// LLaMA-style (SwiGLU, MHA unless noted, vocab 32000). Zeppelin evaluates "LLaMA-style MHA
// 3B, 7B, 13B, 30B dense; 8x550M MoE" without shapes:
//! 3B: OpenLLaMA-3B shape (H 3200, 26 layers, 32 heads of 100, FFN 8640).
inline model_config llama_3b() { return {"llama-3b", 26, 3200, 32, 32, 100, 8640, 32000, true, 0, 0, 2}; }
//! 7B: LLaMA-2-7B (H 4096, 32 layers, 32 heads, FFN 11008). Also WLB-LLM's 7B and Hydraulis' 7B.
inline model_config llama_7b() { return {"llama-7b", 32, 4096, 32, 32, 128, 11008, 32000, true, 0, 0, 2}; }
//! 13B: LLaMA-2-13B (H 5120, 40 layers, 40 heads, FFN 13824). Also Hydraulis' 13B.
inline model_config llama_13b() { return {"llama-13b", 40, 5120, 40, 40, 128, 13824, 32000, true, 0, 0, 2}; }
//! 30B: LLaMA-1-33B (H 6656, 60 layers, 52 heads, FFN 17920). Hydraulis calls it 32B
//! (H/L 6656/60); WLB-LLM's 30B is taken to be the same shape.
inline model_config llama_30b() { return {"llama-30b", 60, 6656, 52, 52, 128, 17920, 32000, true, 0, 0, 2}; }
//! 32B: Hydraulis' 32B (H/L 6656/60, section 8), with 64 heads of 104 so that the TP 8 and
//! 16 of the authors' scheme list divide them (LLaMA-1-33B's 52 heads of 128 do not).
inline model_config llama_32b() { return {"llama-32b", 60, 6656, 64, 64, 104, 17920, 32000, true, 0, 0, 2}; }
//! 70B: LLaMA-2-70B (H 8192, 80 layers, 64 heads, 8 KV heads - GQA, FFN 28672). WLB-LLM.
inline model_config llama_70b() { return {"llama-70b", 80, 8192, 64, 8, 128, 28672, 32000, true, 0, 0, 2}; }
//! 550M dense (WLB-LLM): H 1536, 16 layers, 12 heads of 128, FFN 4096 -> 0.55e9 parameters
//! with embeddings (12 L H^2 + 2 V H = 453M + 98M).
inline model_config llama_550m() { return {"llama-550m", 16, 1536, 12, 12, 128, 4096, 32000, true, 0, 0, 2}; }
//! 8x550M MoE (Zeppelin): the 550M shape with each MLP replaced by 8 experts, top-2
//! (Mixtral-style "8 x dense" naming).
inline model_config moe_8x550m() { return {"moe-8x550m", 16, 1536, 12, 12, 128, 4096, 32000, true, 8, 2, 2}; }
//! LLaMA-3-8B: a GQA example (32 heads, 8 KV heads, FFN 14336, vocab 128256).
inline model_config llama3_8b() { return {"llama3-8b", 32, 4096, 32, 8, 128, 14336, 128256, true, 0, 0, 2}; }
//! GPT-style 7B / 13B / 30B of InfiniPipe: plain 4H GELU MLP, vocab 50257.
inline model_config gpt_7b() { return {"gpt-7b", 32, 4096, 32, 32, 128, 16384, 50257, false, 0, 0, 2}; }
inline model_config gpt_13b() { return {"gpt-13b", 40, 5120, 40, 40, 128, 20480, 50257, false, 0, 0, 2}; }
inline model_config gpt_30b() { return {"gpt-30b", 48, 7168, 56, 56, 128, 28672, 50257, false, 0, 0, 2}; }
}  // namespace models

//! Every preset, in a fixed order (model_by_name() searches it).
inline std::vector<model_config> model_presets() {
  using namespace models;
  return {llama_550m(), llama_3b(), llama_7b(), llama_13b(), llama_30b(), llama_32b(), llama_70b(), moe_8x550m(), llama3_8b(),
          gpt_7b(), gpt_13b(), gpt_30b()};
}

//! A preset by name: its full name ("llama-7b", "moe-8x550m") or the size alone for the
//! LLaMA presets ("3b", "7b", "13b", "30b", "32b", "70b", "550m", "8x550m"). Throws invalid_argument
//! listing the valid names for an unknown one.
inline model_config model_by_name(std::string_view name) {
  const std::string full = name == "8x550m" ? std::string("moe-8x550m")
                           : name.find('-') == std::string_view::npos ? "llama-" + std::string(name)
                                                                      : std::string(name);
  std::string valid;
  for (auto& m : model_presets()) {
    if (m.name == full) return m;
    valid += (valid.empty() ? "" : ", ") + m.name;
  }
  ZEPPELIN_THROW(invalid_argument, "unknown model '" + std::string(name) + "' (valid: " + valid + ")", {});
}

ZEPPELIN_NAMESPACE_END
