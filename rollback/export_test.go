package rollback

// Names the tests use that the package does not export: its users need none of them.
const RecordsName = recordsName
