// GGUF module umbrella: reader (mmap, validation), writer, value and type tables.
#pragma once
#include "strata/gguf/keys.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/gguf/tensor_info.hpp"
#include "strata/gguf/type_id.hpp"
#include "strata/gguf/value.hpp"
#include "strata/gguf/writer.hpp"
