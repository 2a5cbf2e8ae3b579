package disk

// defaultNameMax is the longest name most file systems take (NAME_MAX).
const defaultNameMax = 255
