#include "cc/train/family.h"

namespace nfn {

std::unique_ptr<ModelFamily> make_family(const TrainConfig& c) {
  return decoder_family(c.model_family) ? make_decoder_family(c) : make_gpt_family(c);
}

}  // namespace nfn
