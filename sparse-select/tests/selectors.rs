//! The selector suite on the CPU reference backend.

sparse_select::selector_test_suite!(backend_cpu::Cpu);
