#include "context.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "devices.hpp"

#include "strata/core/error.hpp"

namespace strata::gpu {
namespace {

vk::raii::Context make_context() {
  try {
    return vk::raii::Context();
  } catch (const std::exception& e) {
    throw error(std::string("Vulkan is not available: could not load the Vulkan loader (libvulkan.so.1): ") +
                e.what() + ". Install a Vulkan driver and loader (Debian: libvulkan1 mesa-vulkan-drivers), or use --backend cpu");
  }
}

vk::raii::Instance make_instance(const vk::raii::Context& ctx) {
  const vk::ApplicationInfo app("strata", 1, "strata", 1, VK_API_VERSION_1_3);
  std::vector<const char*> ext;
  vk::InstanceCreateFlags flags;
  for (const auto& e : ctx.enumerateInstanceExtensionProperties())
    if (std::string_view(e.extensionName) == VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME) {
      ext.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
      flags |= vk::InstanceCreateFlagBits::eEnumeratePortabilityKHR;
    }
  try {
    return vk::raii::Instance(ctx, vk::InstanceCreateInfo(flags, &app, {}, ext));
  } catch (const vk::SystemError& e) {
    throw error(std::string("Vulkan instance creation failed (needs Vulkan 1.3): ") + e.what());
  }
}

bool has_extension(const vk::raii::PhysicalDevice& pd, std::string_view name) {
  for (const auto& e : pd.enumerateDeviceExtensionProperties())
    if (std::string_view(e.extensionName) == name) return true;
  return false;
}

std::string hex(const std::uint8_t* p, std::size_t n) {
  std::string s;
  char buf[3];
  for (std::size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", p[i]);
    s += buf;
  }
  return s;
}

}  // namespace

namespace {
// What the loader reports, probed once per process. The probe's instance is kept alive on
// purpose: destroying it makes the loader unload the driver, and Mesa's lavapipe then leaves
// allocations no live module references, which leak checkers report (ASan in CI).
struct device_probe {
  vk::raii::Context ctx = make_context();
  vk::raii::Instance instance = make_instance(ctx);
  std::vector<std::string> names;
  std::vector<bool> is_gpu;
  device_probe() {
    for (const auto& pd : vk::raii::PhysicalDevices(instance)) {
      const auto p = pd.getProperties();
      names.emplace_back(p.deviceName.data());
      is_gpu.push_back(p.deviceType != vk::PhysicalDeviceType::eCpu);
    }
  }
};
const device_probe& probe() {
  static const device_probe* p = new device_probe();  // never destroyed (see above)
  return *p;
}
}  // namespace

std::vector<std::string> list_devices() { return probe().names; }

namespace {
// device_index < 0: the first discrete GPU, else the first integrated, else the first device.
std::size_t pick_device(const vk::raii::PhysicalDevices& devices, int device_index) {
  if (devices.empty()) throw error("no Vulkan device found (the loader sees no driver); use --backend cpu");
  std::size_t pick = 0;
  if (device_index >= 0) {
    if (std::size_t(device_index) >= devices.size()) {
      std::string names;
      for (std::size_t i = 0; i < devices.size(); ++i)
        names += (i ? ", " : "") + std::to_string(i) + ": " + std::string(devices[i].getProperties().deviceName.data());
      throw error("Vulkan device " + std::to_string(device_index) + " does not exist (devices: " + names + ")");
    }
    return std::size_t(device_index);
  }
  auto rank = [](vk::PhysicalDeviceType t) {
    return t == vk::PhysicalDeviceType::eDiscreteGpu ? 0 : t == vk::PhysicalDeviceType::eIntegratedGpu ? 1 : 2;
  };
  for (std::size_t i = 1; i < devices.size(); ++i)
    if (rank(devices[i].getProperties().deviceType) < rank(devices[pick].getProperties().deviceType)) pick = i;
  return pick;
}
}  // namespace

namespace {

// The device-local heaps' sizes, and with VK_EXT_memory_budget this process's budget and usage.
device_memory device_local_memory(const vk::raii::PhysicalDevice& pd) {
  device_memory m;
  m.budget_ext = has_extension(pd, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  // The budget struct may be chained only when the extension is there.
  vk::PhysicalDeviceMemoryBudgetPropertiesEXT budget;
  vk::PhysicalDeviceMemoryProperties mp;
  if (m.budget_ext) {
    const auto chain = pd.getMemoryProperties2<vk::PhysicalDeviceMemoryProperties2, vk::PhysicalDeviceMemoryBudgetPropertiesEXT>();
    mp = chain.get<vk::PhysicalDeviceMemoryProperties2>().memoryProperties;
    budget = chain.get<vk::PhysicalDeviceMemoryBudgetPropertiesEXT>();
  } else {
    mp = pd.getMemoryProperties();
  }
  for (std::uint32_t h = 0; h < mp.memoryHeapCount; ++h) {
    if (!(mp.memoryHeaps[h].flags & vk::MemoryHeapFlagBits::eDeviceLocal)) continue;
    m.heap_bytes += mp.memoryHeaps[h].size;
    m.budget_bytes += m.budget_ext ? budget.heapBudget[h] : mp.memoryHeaps[h].size;
    m.usage_bytes += m.budget_ext ? budget.heapUsage[h] : 0;
  }
  return m;
}

}  // namespace

device_memory query_device_memory(int index) {
  vk::raii::PhysicalDevices devices(probe().instance);
  const vk::raii::PhysicalDevice& pd = devices[pick_device(devices, index)];
  const auto props = pd.getProperties();
  device_memory m = device_local_memory(pd);
  m.name = props.deviceName.data();
  m.is_cpu = props.deviceType == vk::PhysicalDeviceType::eCpu;
  return m;
}

device_memory context::memory_now() const {
  device_memory m = device_local_memory(physical_);
  m.name = info_.name;
  return m;
}

context::context(int device_index) : vk_context_(make_context()) {
  instance_ = make_instance(vk_context_);
  vk::raii::PhysicalDevices devices(instance_);
  physical_ = std::move(devices[pick_device(devices, device_index)]);

  const auto props = physical_.getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceSubgroupProperties,
                                              vk::PhysicalDeviceVulkan11Properties, vk::PhysicalDeviceDriverProperties>();
  const auto& p = props.get<vk::PhysicalDeviceProperties2>().properties;
  if (p.apiVersion < VK_API_VERSION_1_2)
    throw error(std::string("Vulkan device '") + p.deviceName.data() + "' supports only Vulkan " +
                std::to_string(VK_API_VERSION_MAJOR(p.apiVersion)) + "." + std::to_string(VK_API_VERSION_MINOR(p.apiVersion)) +
                "; Strata needs 1.2 or newer");
  info_.name = p.deviceName.data();
  const auto& drv = props.get<vk::PhysicalDeviceDriverProperties>();
  info_.driver = std::string(drv.driverName.data()) + " " + drv.driverInfo.data();
  info_.vendor_id = p.vendorID;
  info_.driver_version = p.driverVersion;
  info_.uuid = hex(p.pipelineCacheUUID.data(), VK_UUID_SIZE);
  info_.is_cpu = p.deviceType == vk::PhysicalDeviceType::eCpu;
  info_.subgroup_size = props.get<vk::PhysicalDeviceSubgroupProperties>().subgroupSize;
  if (has_extension(physical_, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME))
    info_.sm_count = physical_.getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV>()
                         .get<vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV>()
                         .shaderSMCount;
  info_.max_shared_bytes = p.limits.maxComputeSharedMemorySize;
  info_.max_storage_range = p.limits.maxStorageBufferRange;
  info_.max_allocation = props.get<vk::PhysicalDeviceVulkan11Properties>().maxMemoryAllocationSize;
  info_.min_storage_align = p.limits.minStorageBufferOffsetAlignment;
  info_.max_push_constants = p.limits.maxPushConstantsSize;
  info_.max_workgroups_x = p.limits.maxComputeWorkGroupCount[0];
  info_.max_workgroup_threads = std::min(p.limits.maxComputeWorkGroupInvocations, p.limits.maxComputeWorkGroupSize[0]);
  info_.timestamp_period_ns = p.limits.timestampPeriod;
  // Tensor cores: VK_NV_cooperative_matrix with a 16x16x16 f16 x f16 -> f32 shape.
  if (has_extension(physical_, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) && info_.subgroup_size == 32) {
    for (const auto& c : physical_.getCooperativeMatrixPropertiesNV())
      if (c.MSize == 16 && c.NSize == 16 && c.KSize == 16 && c.AType == vk::ComponentTypeNV::eFloat16 &&
          c.BType == vk::ComponentTypeNV::eFloat16 && c.CType == vk::ComponentTypeNV::eFloat32 &&
          c.DType == vk::ComponentTypeNV::eFloat32 && c.scope == vk::ScopeNV::eSubgroup)
        info_.nv_coopmat = true;
    for (const auto& c : physical_.getCooperativeMatrixPropertiesNV())
      if (c.MSize == 16 && c.NSize == 16 && c.KSize == 32 && c.AType == vk::ComponentTypeNV::eSint8 &&
          c.BType == vk::ComponentTypeNV::eSint8 && c.CType == vk::ComponentTypeNV::eSint32 &&
          c.DType == vk::ComponentTypeNV::eSint32 && c.scope == vk::ScopeNV::eSubgroup)
        info_.nv_coopmat_int8 = info_.nv_coopmat;
    for (const auto& c : physical_.getCooperativeMatrixPropertiesNV())
      if (c.MSize == 16 && c.NSize == 8 && c.KSize == 16 && c.AType == vk::ComponentTypeNV::eFloat16 &&
          c.BType == vk::ComponentTypeNV::eFloat16 && c.CType == vk::ComponentTypeNV::eFloat32 &&
          c.DType == vk::ComponentTypeNV::eFloat32 && c.scope == vk::ScopeNV::eSubgroup)
        info_.nv_coopmat_n8 = info_.nv_coopmat;
  }

  const auto feats = physical_.getFeatures2<vk::PhysicalDeviceFeatures2, vk::PhysicalDeviceVulkan11Features,
                                            vk::PhysicalDeviceVulkan12Features, vk::PhysicalDeviceVulkan13Features>();
  // Packed int8 dot products (Vulkan 1.3 core feature): the integer matvec uses them when present.
  info_.int_dot = p.apiVersion >= VK_API_VERSION_1_3 &&
                  feats.get<vk::PhysicalDeviceVulkan13Features>().shaderIntegerDotProduct;
  const auto& f11 = feats.get<vk::PhysicalDeviceVulkan11Features>();
  const auto& f12 = feats.get<vk::PhysicalDeviceVulkan12Features>();
  std::string missing;
  if (!f11.storageBuffer16BitAccess) missing += " storageBuffer16BitAccess";
  if (!f12.storageBuffer8BitAccess) missing += " storageBuffer8BitAccess";
  if (!f12.shaderFloat16) missing += " shaderFloat16";
  if (!f12.shaderInt8) missing += " shaderInt8";
  if (!feats.get<vk::PhysicalDeviceFeatures2>().features.shaderInt16) missing += " shaderInt16";
  if (!has_extension(physical_, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME)) missing += " " VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME;
  if (!missing.empty()) throw error("Vulkan device '" + info_.name + "' lacks features Strata needs:" + missing);

  const auto families = physical_.getQueueFamilyProperties();
  bool found = false;
  for (std::uint32_t i = 0; i < families.size() && !found; ++i)
    if (families[i].queueFlags & vk::QueueFlagBits::eCompute) {
      queue_family_ = i;
      found = true;
      info_.timestamps = families[i].timestampValidBits != 0;
    }
  if (!found) throw error("Vulkan device '" + info_.name + "' has no compute queue");

  mem_props_ = physical_.getMemoryProperties();
  for (std::uint32_t h = 0; h < mem_props_.memoryHeapCount; ++h)
    if (mem_props_.memoryHeaps[h].flags & vk::MemoryHeapFlagBits::eDeviceLocal)
      info_.device_local_bytes = std::max<std::uint64_t>(info_.device_local_bytes, mem_props_.memoryHeaps[h].size);

  // Two queues where the family has them: the step's, and a side queue for copies beside it.
  const std::uint32_t n_queues = std::min(families[queue_family_].queueCount, 2u);
  const float priorities[2] = {1.0f, 1.0f};
  const vk::DeviceQueueCreateInfo qci({}, queue_family_, n_queues, priorities);
  vk::PhysicalDeviceFeatures2 enable;
  enable.features.shaderInt16 = VK_TRUE;
  enable.features.shaderInt64 = feats.get<vk::PhysicalDeviceFeatures2>().features.shaderInt64;
  info_.storage_array_indexing = feats.get<vk::PhysicalDeviceFeatures2>().features.shaderStorageBufferArrayDynamicIndexing;
  enable.features.shaderStorageBufferArrayDynamicIndexing = info_.storage_array_indexing;
  vk::PhysicalDeviceVulkan11Features e11;
  e11.storageBuffer16BitAccess = VK_TRUE;
  vk::PhysicalDeviceVulkan12Features e12;
  e12.storageBuffer8BitAccess = VK_TRUE;
  e12.shaderFloat16 = VK_TRUE;
  e12.shaderInt8 = VK_TRUE;
  e12.timelineSemaphore = f12.timelineSemaphore;
  info_.timeline = f12.timelineSemaphore;
  e12.hostQueryReset = f12.hostQueryReset;
  vk::PhysicalDeviceVulkan13Features e13;
  e13.shaderIntegerDotProduct = info_.int_dot;
  enable.pNext = &e11;
  e11.pNext = &e12;

  std::vector<const char*> ext{VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME};
  vk::PhysicalDeviceCooperativeMatrixFeaturesNV coop;
  if (info_.nv_coopmat) {
    coop.cooperativeMatrix = VK_TRUE;
    e12.pNext = &coop;
    ext.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  }
  if (p.apiVersion >= VK_API_VERSION_1_3) {  // chained only where the struct is known
    e13.pNext = e12.pNext;
    e12.pNext = &e13;
  }
  vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR exec_props;
  if (const char* v = std::getenv("STRATA_VK_PIPELINE_STATS");
      v && std::string_view(v) == "1" && has_extension(physical_, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME) &&
      physical_.getFeatures2<vk::PhysicalDeviceFeatures2, vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR>()
          .get<vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR>()
          .pipelineExecutableInfo) {
    exec_props.pipelineExecutableInfo = VK_TRUE;
    exec_props.pNext = e11.pNext;
    e11.pNext = &exec_props;
    ext.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    info_.pipeline_stats = true;
  }
  if (const char* v = std::getenv("STRATA_VK_PIPELINE_TIMES")) info_.pipeline_times = std::string_view(v) == "1";
  vk::DeviceCreateInfo dci({}, qci, {}, ext);
  dci.pNext = &enable;
  try {
    device_ = vk::raii::Device(physical_, dci);
  } catch (const vk::SystemError& e) {
    throw error("Vulkan device '" + info_.name + "' could not be opened: " + e.what());
  }
  queue_ = device_.getQueue(queue_family_, 0);
  if (n_queues > 1) side_queue_ = device_.getQueue(queue_family_, 1);
}

memory_use classify_buffer_label(const std::string& label) noexcept {
  if (label.starts_with("weights")) return memory_use::weights;
  if (label.starts_with("KV")) return memory_use::kv;
  return memory_use::scratch;
}

void context::charge(std::uint64_t bytes, const std::string& label) const {
  const memory_use use = classify_buffer_label(label);
  if (ledger_.budget && ledger_.total() + bytes > ledger_.budget) {
    const auto mib = [](std::uint64_t b) { return std::to_string((b + (1ull << 20) - 1) >> 20) + " MiB"; };
    throw error("GPU memory budget exceeded: " + label + " needs " + mib(bytes) + " but --gpu-budget " +
                mib(ledger_.budget) + " has " + mib(ledger_.budget - ledger_.total()) + " left (weights " +
                mib(ledger_.weights) + ", KV " + mib(ledger_.kv) + ", scratch " + mib(ledger_.scratch) +
                " allocated on '" + info_.name + "'); raise --gpu-budget, lower -c or -ngl, or use --backend cpu");
  }
  (use == memory_use::weights ? ledger_.weights : use == memory_use::kv ? ledger_.kv : ledger_.scratch) += bytes;
}

void context::release(std::uint64_t bytes, memory_use use) const noexcept {
  std::uint64_t& n = use == memory_use::weights ? ledger_.weights : use == memory_use::kv ? ledger_.kv : ledger_.scratch;
  n -= std::min(n, bytes);
}

std::optional<std::uint32_t> context::memory_type(std::uint32_t type_bits, vk::MemoryPropertyFlags required,
                                                  vk::MemoryPropertyFlags preferred) const {
  std::optional<std::uint32_t> fallback;
  for (std::uint32_t i = 0; i < mem_props_.memoryTypeCount; ++i) {
    if (!(type_bits & (1u << i))) continue;
    const auto f = mem_props_.memoryTypes[i].propertyFlags;
    if ((f & required) != required) continue;
    if ((f & preferred) == preferred) return i;
    if (!fallback) fallback = i;
  }
  return fallback;
}

}  // namespace strata::gpu

namespace strata::gpu {
std::vector<bool> gpu_device_kinds() { return probe().is_gpu; }
}  // namespace strata::gpu
