#!/usr/bin/env bash
# Regenerate the synthetic server topologies of configs/ (hwloc XML, as `lstopo FILE.xml` writes
# on a real machine) from their hwloc synthetic descriptions, adding CPU model names and, where
# the server has GPUs, a PCI GPU below the package or sub-NUMA cluster it is attached to.
# Usage: configs/make-configs.sh   (needs lstopo from the hwloc package; run from anywhere)
# A recorded topology of a real server goes here as is: `lstopo --of xml NAME.xml` on it.
set -euo pipefail
cd "$(dirname "$0")"

# name | CPU model | synthetic description (Linux numbering: cores first, SMT siblings after)
configs=(
  "spr-2s|Intel(R) Xeon(R) Platinum 8480+|pack:2 [numa(memory=256GiB)] core:56 pu:2(indexes=2*112:1*2)"
  "spr-2s-snc4|Intel(R) Xeon(R) Platinum 8480+|pack:2 numa:4(memory=64GiB) core:14 pu:2(indexes=2*112:1*2)"
  "xeon-4s|Intel(R) Xeon(R) Platinum 8490H|pack:4 [numa(memory=256GiB)] core:60 pu:2(indexes=2*240:1*2)"
  "epyc-2s-nps4|AMD EPYC 9654 96-Core Processor|pack:2 numa:4(memory=192GiB) l3:3(size=32MiB) core:8 pu:2(indexes=2*192:1*2)"
  "spr-1s-gpu|Intel(R) Xeon(R) Gold 6448Y|pack:1 [numa(memory=256GiB)] core:32 pu:2(indexes=2*32:1*2)"
  "spr-2s-2gpu|Intel(R) Xeon(R) Platinum 8468|pack:2 [numa(memory=512GiB)] core:48 pu:2(indexes=2*96:1*2)"
)
# name | NUMA node os_index the GPU hangs off | PCI bus | CUDA index
gpus=(
  "spr-1s-gpu|0|17|0"
  "spr-2s-2gpu|0|17|0"
  "spr-2s-2gpu|1|97|1"
)

gpu_xml() { # node bus index
  cat <<XML
<object type="Bridge" gp_index="$((9000 + $3 * 10))" bridge_type="0-1" depth="0" bridge_pci="0000:[$2-$2]">
  <object type="PCIDev" gp_index="$((9001 + $3 * 10))" pci_busid="0000:$2:00.0" pci_type="0302 [10de:2331] [10de:1626] a1" pci_link_speed="31.507692">
    <object type="OSDev" gp_index="$((9002 + $3 * 10))" name="cuda$3" subtype="CUDA" osdev_type="5">
      <info name="Backend" value="CUDA"/>
      <info name="GPUVendor" value="NVIDIA Corporation"/>
      <info name="GPUModel" value="NVIDIA H100 PCIe"/>
    </object>
    <object type="OSDev" gp_index="$((9003 + $3 * 10))" name="nvml$3" osdev_type="1">
      <info name="Backend" value="NVML"/>
      <info name="GPUModel" value="NVIDIA H100 PCIe"/>
    </object>
  </object>
</object>
XML
}

for c in "${configs[@]}"; do
  IFS='|' read -r name model desc <<<"$c"
  lstopo --input "$desc" --of xml - 2>/dev/null |
    sed -e "s|\(<object type=\"Package\"[^>]*>\)|\1\n<info name=\"CPUModel\" value=\"$model\"/>|" \
        -e '/<info name="ProcessName"/d' -e '/<info name="hwlocVersion"/d' > "$name.xml.tmp"
  for g in "${gpus[@]}"; do
    IFS='|' read -r gname node bus idx <<<"$g"
    [ "$gname" = "$name" ] || continue
    # Insert the GPU as a sibling of its NUMA node: a child of the node's package or cluster.
    gpu_xml "$node" "$bus" "$idx" > gpu.tmp
    awk -v node="$node" 'index($0, "<object type=\"NUMANode\" os_index=\"" node "\"") && !done {
                           while ((getline l < "gpu.tmp") > 0) print l; done = 1 } { print }' \
      "$name.xml.tmp" > "$name.xml.tmp2"
    mv "$name.xml.tmp2" "$name.xml.tmp"
    rm -f gpu.tmp
  done
  mv "$name.xml.tmp" "$name.xml"
  echo "configs: wrote $name.xml ($desc)"
done
