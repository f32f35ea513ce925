// examples/train_gpt/corpus.hpp
// Documents for the reference training loop: a synthetic stream the example generates, or a
// file of token ids.
//   synthetic: document d of step s has a length drawn from [min_length, max_length] and
//              follows t[i + 1] = next[(t[i] + k) mod V], with `next` one fixed permutation of
//              the vocabulary (drawn from the seed), k in 0..3 drawn per document, and one token
//              in eight replaced by a random one: a bigram table to learn and a per-document
//              shift that only attention over the document can infer, with noise that bounds
//              the loss from below. Deterministic in (seed, step).
//   file     : one document per line, token ids separated by spaces; steps take documents in
//              order, cycling, until the step's token budget is filled
// A step's batch is its documents' lengths (zeppelin::batch, in document order) and their
// tokens in the packed stream order the batch's offsets give.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/random.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace train_gpt {

struct step_batch {
  zeppelin::batch lengths;
  std::vector<std::int64_t> tokens;  //!< packed stream order
};

class corpus {
 public:
  //! The synthetic stream.
  corpus(int vocab, std::int64_t min_length, std::int64_t max_length, std::uint64_t seed)
      : vocab_(vocab), min_(min_length), max_(max_length), seed_(seed) {
    ZEPPELIN_EXPECTS(vocab >= 2 && min_length >= 2 && max_length >= min_length,
                     "the vocabulary needs 2 tokens and documents 2 tokens at least (min <= max)",
                     {{"vocab", double(vocab)}, {"min_length", double(min_length)}, {"max_length", double(max_length)}});
    next_.resize(static_cast<std::size_t>(vocab));
    for (std::size_t i = 0; i < next_.size(); ++i) next_[i] = static_cast<std::int64_t>(i);
    zeppelin::random_generator rng(seed, 0);
    for (std::size_t i = next_.size() - 1; i > 0; --i) std::swap(next_[i], next_[rng.below(i + 1)]);  // Fisher-Yates
  }

  //! Documents of `path` (see the file comment). Throws invalid_argument naming the line for
  //! an id outside [0, vocab) or an unreadable file, and when no document has 2 tokens.
  corpus(const std::string& path, int vocab) : vocab_(vocab) {
    std::ifstream in(path);
    ZEPPELIN_EXPECTS(in.good(), "cannot read the corpus file " + path, {});
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      std::istringstream words(line);
      std::vector<std::int64_t> doc;
      std::int64_t id = 0;
      while (words >> id) {
        ZEPPELIN_EXPECTS(id >= 0 && id < vocab, "a token id outside the vocabulary in " + path,
                         {{"line", double(number)}, {"id", double(id)}, {"vocab", double(vocab)}});
        doc.push_back(id);
      }
      if (doc.size() >= 2) documents_.push_back(std::move(doc));
    }
    ZEPPELIN_EXPECTS(!documents_.empty(), "the corpus file has no document of 2 tokens or more: " + path, {});
  }

  //! The documents of step `step`, about `tokens` tokens (the last document is cut to fit).
  [[nodiscard]] step_batch next(std::int64_t step, std::int64_t tokens) {
    std::vector<std::vector<std::int64_t>> docs;
    std::int64_t total = 0;
    zeppelin::random_generator rng(seed_, static_cast<std::uint64_t>(step) + 1);
    while (total < tokens) {
      std::vector<std::int64_t> d = documents_.empty() ? synthetic(rng) : documents_[cursor_++ % documents_.size()];
      d.resize(static_cast<std::size_t>(std::min<std::int64_t>(static_cast<std::int64_t>(d.size()), tokens - total)));
      total += static_cast<std::int64_t>(d.size());
      docs.push_back(std::move(d));
    }
    std::vector<zeppelin::token_count> lengths;
    std::vector<std::int64_t> tokens_of_step;
    for (const auto& d : docs) {
      lengths.push_back(static_cast<zeppelin::token_count>(d.size()));
      tokens_of_step.insert(tokens_of_step.end(), d.begin(), d.end());
    }
    return {zeppelin::batch(lengths), std::move(tokens_of_step)};
  }

 private:
  std::vector<std::int64_t> synthetic(zeppelin::random_generator& rng) const {
    const auto v = static_cast<std::uint64_t>(vocab_);
    const auto length = min_ + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(max_ - min_ + 1)));
    const std::uint64_t shift = rng.below(4);
    std::vector<std::int64_t> d{static_cast<std::int64_t>(rng.below(v))};
    while (static_cast<std::int64_t>(d.size()) < length) {
      const std::int64_t next = next_[(static_cast<std::uint64_t>(d.back()) + shift) % v];
      d.push_back(rng.below(8) == 0 ? static_cast<std::int64_t>(rng.below(v)) : next);
    }
    return d;
  }

  int vocab_ = 0;
  std::int64_t min_ = 0, max_ = 0;
  std::uint64_t seed_ = 0;
  std::vector<std::int64_t> next_;  // the bigram permutation of the synthetic language
  std::vector<std::vector<std::int64_t>> documents_;
  std::size_t cursor_ = 0;
};

}  // namespace train_gpt
