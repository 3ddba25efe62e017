namespace fuseops::cli { struct Registry; void register_moe_cases(Registry&) {} }
