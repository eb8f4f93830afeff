package config

// PortSpec is a parsed -t/-u/-T/-U option set. Placeholder: the port
// specification parser replaces this file.
type PortSpec struct{}
