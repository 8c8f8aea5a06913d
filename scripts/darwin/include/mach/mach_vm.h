/*
 * Stand-in for the macOS SDK's <mach/mach_vm.h>, used only by
 * scripts/darwin-build.sh when cross-compiling for darwin/arm64 with zig,
 * whose bundled macOS headers lack this one. The only user is the
 * Prometheus client's process collector (process_collector_mem_cgo_darwin.c),
 * which calls mach_vm_region; this declares that one function with its
 * documented Mach signature. A build on a Mac uses the real SDK header.
 */
#ifndef FUSION_MACH_VM_H
#define FUSION_MACH_VM_H
#include <mach/mach_types.h>
#include <mach/vm_region.h>

kern_return_t mach_vm_region(vm_map_read_t target_task,
                             mach_vm_address_t *address,
                             mach_vm_size_t *size,
                             vm_region_flavor_t flavor,
                             vm_region_info_t info,
                             mach_msg_type_number_t *infoCnt,
                             mach_port_t *object_name);
#endif
